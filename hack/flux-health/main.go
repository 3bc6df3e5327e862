// Command flux-health judges objects as Flux judges them while it waits for a Kustomization
// (spec.wait, spec.healthChecks) or a HelmRelease: with kstatus's default (the generic status
// reader over github.com/fluxcd/cli-utils/pkg/kstatus/status.Compute) and with the
// healthCheckExprs of a file through Flux's own CEL evaluator (github.com/fluxcd/pkg/runtime/cel,
// the status reader kustomize-controller hands its poller). The readers are picked as the poller
// picks them: a custom reader that supports the object's GroupKind first, else the default.
// It is the evaluator of tests/health/test_flux_health.py.
//
//	flux-health [--exprs FILE] PATH...
//
// PATH: a YAML or JSON file (several documents allowed) or a directory (its *.yaml, *.yml and
// *.json, recursively, in lexical order). FILE: a YAML document holding the list under
// healthCheckExprs, at the top or under spec (a Kustomization or a HelmRelease); the entries are
// decoded strictly (an unknown key is an error).
//
// Output (stdout) is one JSON document: {"objects": [{"source", "apiVersion", "kind",
// "namespace", "name", "default": verdict, "flux": verdict}]}, verdict = {"status", "message",
// "error", "expression"}: status is what the poller reports (Current, InProgress, Failed,
// Terminating, Unknown: an evaluation error is Unknown with the error, as in the poller);
// expression is true when a healthCheckExprs entry judged it. Exit status 0, or 1 on an error
// reading the inputs.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/engine"
	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/statusreaders"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// maxInput bounds every file read (objects and expressions).
const maxInput = 4 << 20

type verdict struct {
	Status     string `json:"status"`
	Message    string `json:"message,omitempty"`
	Error      string `json:"error,omitempty"`
	Expression bool   `json:"expression"`
}

type judged struct {
	Source     string  `json:"source"`
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Namespace  string  `json:"namespace,omitempty"`
	Name       string  `json:"name"`
	Default    verdict `json:"default"`
	Flux       verdict `json:"flux"`
}

type report struct {
	Objects []judged `json:"objects"`
}

func main() {
	code, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flux-health:", err)
	}
	os.Exit(code)
}

func run(args []string, stdout io.Writer) (int, error) {
	fl := flag.NewFlagSet("flux-health", flag.ContinueOnError)
	exprsPath := fl.String("exprs", "", "a file with healthCheckExprs (top level or under spec)")
	if err := fl.Parse(args); err != nil {
		return 1, err
	}
	if fl.NArg() == 0 {
		return 1, errors.New("usage: flux-health [--exprs FILE] PATH...")
	}
	var checks []kustomize.CustomHealthCheck
	if *exprsPath != "" {
		var err error
		if checks, err = readExprs(*exprsPath); err != nil {
			return 1, err
		}
	}
	newCustom, err := cel.NewStatusReader(checks)
	if err != nil {
		return 1, err
	}
	// kustomize-controller (getClientAndPoller): CustomStatusReaders = [its Job reader, the CEL
	// reader]; the poller takes the first that supports the kind, else (for a custom resource)
	// the generic reader over Compute. The Job reader supports only batch/Job: left out here.
	custom := newCustom(nil)
	fallback := statusreaders.NewGenericStatusReader(nil, status.Compute)

	files, err := expand(fl.Args())
	if err != nil {
		return 1, err
	}
	out := report{Objects: []judged{}}
	ctx := context.Background()
	for _, file := range files {
		objs, err := readObjects(file)
		if err != nil {
			return 1, err
		}
		for i, u := range objs {
			gk := u.GroupVersionKind().GroupKind()
			j := judged{
				Source:     fmt.Sprintf("%s#%d", file, i),
				APIVersion: u.GetAPIVersion(),
				Kind:       u.GetKind(),
				Namespace:  u.GetNamespace(),
				Name:       u.GetName(),
				Default:    judge(ctx, fallback, u, false),
			}
			if custom.Supports(gk) {
				j.Flux = judge(ctx, custom, u, true)
			} else {
				j.Flux = j.Default
			}
			out.Objects = append(out.Objects, j)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return 1, err
	}
	return 0, nil
}

// judge reads the status as the poller's status reader reports it for an object it fetched.
func judge(ctx context.Context, r engine.StatusReader, u *unstructured.Unstructured, expr bool) verdict {
	rs, err := r.ReadStatusForObject(ctx, nil, u.DeepCopy())
	if err != nil {
		return verdict{Status: status.UnknownStatus.String(), Error: err.Error(), Expression: expr}
	}
	v := verdict{Status: rs.Status.String(), Message: rs.Message, Expression: expr}
	if rs.Error != nil {
		v.Error = rs.Error.Error()
	}
	return v
}

// readExprs decodes healthCheckExprs from FILE: at the top level, or under spec.
func readExprs(path string) ([]kustomize.CustomHealthCheck, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	raw, ok := doc["healthCheckExprs"]
	if !ok {
		var spec map[string]json.RawMessage
		if s, found := doc["spec"]; found {
			if err := json.Unmarshal(s, &spec); err != nil {
				return nil, fmt.Errorf("%s: spec: %w", path, err)
			}
		}
		if raw, ok = spec["healthCheckExprs"]; !ok {
			return nil, fmt.Errorf("%s: no healthCheckExprs at the top or under spec", path)
		}
	}
	var checks []kustomize.CustomHealthCheck
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&checks); err != nil {
		return nil, fmt.Errorf("%s: healthCheckExprs: %w", path, err)
	}
	for i, c := range checks {
		if c.APIVersion == "" || c.Kind == "" {
			return nil, fmt.Errorf("%s: healthCheckExprs[%d]: apiVersion and kind are required", path, i)
		}
	}
	return checks, nil
}

// expand turns PATH arguments into files: a directory gives its YAML and JSON files.
func expand(args []string) ([]string, error) {
	var files []string
	for _, arg := range args {
		info, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, arg)
			continue
		}
		var found []string
		err = filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					found = append(found, p)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	return files, nil
}

// readObjects decodes every non-empty document of a file (a List's items one by one) as the
// client of a controller does (unstructured's JSON scheme: integers are int64).
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			out = append(out, o)
		case *unstructured.UnstructuredList:
			for i := range o.Items {
				out = append(out, &o.Items[i])
			}
		default:
			return nil, fmt.Errorf("%s: not an object: %T", path, obj)
		}
	}
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxInput+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxInput)
	}
	return data, nil
}
