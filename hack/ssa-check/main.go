// Command ssa-check applies manifests and detects drift with Flux's server-side-apply
// library (github.com/fluxcd/pkg/ssa), configured as Flux's kustomize-controller configures
// it: its field manager, its owner labels, its cleanup of kubectl's field managers, staged
// apply (CRDs and Namespaces first). It is the GitOps engine of tests/deploy/test_gitops.py.
//
//	ssa-check apply [flags] PATH...   server-side apply (PATH: a file, a directory of *.yaml, or -)
//	ssa-check diff  [flags] PATH...   the library's dry-run drift detection, one JSON line per object
//
// Output (stdout) is one JSON document: {"command", "fieldManager", "objects": [{"subject",
// "action", "patch"}], "drifted": [subjects]}. Exit status: 0, or 2 with --fail-on-drift when an
// object drifted (diff: the library reports created/configured, or a non-empty patch; apply: an
// object was created or configured), or 1 on an error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/jsondiff"
	"github.com/fluxcd/pkg/ssa/utils"
	wjsondiff "github.com/wI2L/jsondiff"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Flux kustomize-controller's identity (kustomize-controller/internal/controller).
const (
	fluxManager = "kustomize-controller"
	fluxGroup   = "kustomize.toolkit.fluxcd.io"
)

type options struct {
	kubeconfig     string
	fieldManager   string
	ownerName      string
	ownerNamespace string
	namespace      string
	force          bool
	failOnDrift    bool
	timeout        time.Duration
}

type entry struct {
	Subject string          `json:"subject"`
	Action  string          `json:"action"`
	Patch   wjsondiff.Patch `json:"patch,omitempty"`
	Library string          `json:"library,omitempty"`
}

type report struct {
	Command      string   `json:"command"`
	FieldManager string   `json:"fieldManager"`
	Objects      []entry  `json:"objects"`
	Drifted      []string `json:"drifted"`
}

func main() {
	code, err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ssa-check:", err)
	}
	os.Exit(code)
}

func run(args []string, stdin io.Reader, stdout io.Writer) (int, error) {
	if len(args) == 0 || (args[0] != "apply" && args[0] != "diff") {
		return 1, errors.New("usage: ssa-check apply|diff [flags] PATH... (see the package comment)")
	}
	command := args[0]
	opts := options{}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.StringVar(&opts.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	fs.StringVar(&opts.fieldManager, "field-manager", fluxManager, "server-side apply field manager")
	fs.StringVar(&opts.ownerName, "owner-name", "", "Kustomization name for the owner labels (empty: none)")
	fs.StringVar(&opts.ownerNamespace, "owner-namespace", "flux-system", "Kustomization namespace for the owner labels")
	fs.StringVar(&opts.namespace, "namespace", "", "namespace for namespaced objects that name none (Flux: targetNamespace)")
	fs.BoolVar(&opts.force, "force", false, "recreate objects whose immutable fields changed (Kustomization spec.force)")
	fs.BoolVar(&opts.failOnDrift, "fail-on-drift", false, "exit 2 when an object drifted")
	fs.DurationVar(&opts.timeout, "timeout", 2*time.Minute, "overall timeout")
	if err := fs.Parse(args[1:]); err != nil {
		return 1, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout)
	defer cancel()

	objects, err := readAll(fs.Args(), stdin)
	if err != nil {
		return 1, err
	}
	manager, kube, err := newManager(opts)
	if err != nil {
		return 1, err
	}
	if err := setNamespaces(kube, objects, opts.namespace); err != nil {
		return 1, err
	}
	if opts.ownerName != "" {
		manager.SetOwnerLabels(objects, opts.ownerName, opts.ownerNamespace)
	}
	var out report
	if command == "apply" {
		out, err = apply(ctx, manager, objects, opts)
	} else {
		out, err = diff(ctx, manager, objects, opts)
	}
	if err != nil {
		return 1, err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return 1, err
	}
	if opts.failOnDrift && len(out.Drifted) > 0 {
		return 2, nil
	}
	return 0, nil
}

func newManager(opts options) (*ssa.ResourceManager, client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, nil, err
	}
	poller := polling.NewStatusPoller(kube, kube.RESTMapper(), polling.Options{})
	return ssa.NewResourceManager(kube, poller, ssa.Owner{Field: opts.fieldManager, Group: fluxGroup}), kube, nil
}

// applyOptions are kustomize-controller's (internal/controller/kustomization_controller.go).
func applyOptions(opts options) ssa.ApplyOptions {
	ao := ssa.DefaultApplyOptions()
	ao.Force = opts.force
	ao.ExclusionSelector = map[string]string{fluxGroup + "/reconcile": "disabled"}
	ao.IfNotPresentSelector = map[string]string{fluxGroup + "/ssa": "IfNotPresent"}
	ao.ForceSelector = map[string]string{fluxGroup + "/force": "enabled"}
	ao.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation, fluxGroup + "/checksum"},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: opts.fieldManager, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{fluxGroup + "/ssa": "Merge"},
	}
	ao.WaitTimeout = opts.timeout / 2
	return ao
}

func apply(ctx context.Context, m *ssa.ResourceManager, objects []*unstructured.Unstructured, opts options) (report, error) {
	out := report{Command: "apply", FieldManager: opts.fieldManager, Objects: []entry{}, Drifted: []string{}}
	changes, err := m.ApplyAllStaged(ctx, objects, applyOptions(opts))
	if changes != nil {
		for _, e := range changes.Entries {
			out.Objects = append(out.Objects, entry{Subject: e.Subject, Action: string(e.Action)})
			if e.Action == ssa.CreatedAction || e.Action == ssa.ConfiguredAction {
				out.Drifted = append(out.Drifted, e.Subject)
			}
		}
	}
	return out, err
}

// diff runs ResourceManager.Diff (the action: what an apply would do) and jsondiff.Unstructured
// (the JSON patch `flux diff kustomization` prints) for each object; either one reporting a
// change is drift.
func diff(ctx context.Context, m *ssa.ResourceManager, objects []*unstructured.Unstructured, opts options) (report, error) {
	out := report{Command: "diff", FieldManager: opts.fieldManager, Objects: []entry{}, Drifted: []string{}}
	sort.Sort(ssa.SortableUnstructureds(objects))
	do := ssa.DefaultDiffOptions()
	do.Exclusions = map[string]string{fluxGroup + "/reconcile": "disabled"}
	do.IfNotPresentSelector = map[string]string{fluxGroup + "/ssa": "IfNotPresent"}
	do.Force = opts.force
	for _, obj := range objects {
		change, _, _, err := m.Diff(ctx, obj.DeepCopy(), do)
		if err != nil {
			return out, err
		}
		d, err := jsondiff.Unstructured(ctx, m.Client(), obj.DeepCopy(),
			jsondiff.FieldOwner(opts.fieldManager), jsondiff.MaskSecrets(true))
		if err != nil {
			return out, err
		}
		e := entry{Subject: change.Subject, Action: string(change.Action), Patch: d.Patch, Library: string(d.Type)}
		out.Objects = append(out.Objects, e)
		drifted := change.Action == ssa.CreatedAction || change.Action == ssa.ConfiguredAction
		if drifted || d.Type == jsondiff.DiffTypeCreate || d.Type == jsondiff.DiffTypeUpdate {
			out.Drifted = append(out.Drifted, e.Subject)
		}
	}
	return out, nil
}

// readAll reads every object of the given paths: files, directories (their *.yaml and *.yml,
// recursively, in lexical order) or "-" for stdin.
func readAll(paths []string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	if len(paths) == 0 {
		return nil, errors.New("no PATH given")
	}
	var objects []*unstructured.Unstructured
	for _, p := range paths {
		files := []string{p}
		if info, err := os.Stat(p); p != "-" && err == nil && info.IsDir() {
			files = nil
			err := filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
					files = append(files, path)
				}
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		for _, f := range files {
			objs, err := readFile(f, stdin)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			objects = append(objects, objs...)
		}
	}
	return objects, nil
}

func readFile(path string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	if path == "-" {
		return utils.ReadObjects(stdin)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := utils.ReadObjects(f)
	if err != nil {
		return nil, err
	}
	var kept []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Kustomization" || o.GetAPIVersion() != "kustomize.config.k8s.io/v1beta1" {
			kept = append(kept, o)
		}
	}
	return kept, nil
}

// setNamespaces gives namespaced objects without a namespace the default one, as Flux does
// with a Kustomization's targetNamespace. Kinds the apiserver does not know yet (a CRD applied
// in the same run) are left as they are.
func setNamespaces(kube client.Client, objects []*unstructured.Unstructured, namespace string) error {
	if namespace == "" {
		return nil
	}
	for _, o := range objects {
		if o.GetNamespace() != "" {
			continue
		}
		namespaced, err := kube.IsObjectNamespaced(o)
		if err != nil {
			continue
		}
		if namespaced {
			o.SetNamespace(namespace)
		}
	}
	return nil
}
