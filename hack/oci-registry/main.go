// oci-registry serves an OCI distribution registry (go-containerregistry's pkg/registry, in
// memory) on loopback for the tests of hack/pin-digests.py, seeded with random images, and
// optionally behind registry token auth the way Docker Hub does it (a 401 with
// WWW-Authenticate: Bearer realm=...,service=...,scope=..., a token endpoint, then Bearer).
//
//	oci-registry [--auth] NAME:TAG=image|index ...
//
// It prints one JSON line, {"addr": "127.0.0.1:PORT", "digests": {"NAME:TAG": "sha256:..."}},
// then serves until its standard input closes. An index is multi-arch (linux/amd64 and
// linux/arm64, OCI media types); an image is a single Docker v2 schema 2 manifest.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const service = "oci-registry.test"

func index() (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := random.Image(256, 1)
		if err != nil {
			return nil, err
		}
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx, nil
}

func seed(host, spec string) (string, error) {
	ref, kind, ok := strings.Cut(spec, "=")
	if !ok {
		return "", fmt.Errorf("%q: want NAME:TAG=image|index", spec)
	}
	tag, err := name.NewTag(host+"/"+ref, name.Insecure)
	if err != nil {
		return "", err
	}
	switch kind {
	case "index":
		idx, err := index()
		if err != nil {
			return "", err
		}
		if err := remote.WriteIndex(tag, idx); err != nil {
			return "", err
		}
		d, err := idx.Digest()
		return d.String(), err
	case "image":
		img, err := random.Image(256, 1)
		if err != nil {
			return "", err
		}
		if err := remote.Write(tag, img); err != nil {
			return "", err
		}
		d, err := img.Digest()
		return d.String(), err
	}
	return "", fmt.Errorf("%q: kind must be image or index", spec)
}

// tokenAuth answers /v2/ requests without the token with Docker's 401 challenge and hands the
// token out at /token for the service it names (anonymous, as Docker Hub does for public pulls).
func tokenAuth(next http.Handler, addr string, token string, issued *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			if r.URL.Query().Get("service") != service || !strings.HasPrefix(r.URL.Query().Get("scope"), "repository:") {
				http.Error(w, "bad service or scope", http.StatusBadRequest)
				return
			}
			issued.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"token": token})
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			scope := ""
			if parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/v2/"), "/manifests/", 2); len(parts) == 2 {
				scope = fmt.Sprintf(`,scope="repository:%s:pull"`, parts[0])
			}
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="%s"%s`, addr, service, scope))
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func main() {
	auth := flag.Bool("auth", false, "require a bearer token (Docker's token auth flow)")
	flag.Parse()
	log.SetFlags(0)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))

	// Seed through a second, unauthenticated server on the same in-memory registry.
	seeder := httptest.NewServer(reg)
	digests := map[string]string{}
	host := strings.TrimPrefix(seeder.URL, "http://")
	for _, spec := range flag.Args() {
		d, err := seed(host, spec)
		if err != nil {
			log.Fatalf("oci-registry: seed %s: %v", spec, err)
		}
		ref, _, _ := strings.Cut(spec, "=")
		digests[ref] = d
	}
	seeder.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	handler := http.Handler(reg)
	var issued atomic.Int64
	if *auth {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			log.Fatal(err)
		}
		handler = tokenAuth(reg, addr, hex.EncodeToString(raw), &issued)
	}
	out, err := json.Marshal(map[string]any{"addr": addr, "digests": digests})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
	srv := &http.Server{Handler: handler}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin) // serve until the caller closes our standard input
	_ = srv.Close()
	if *auth {
		fmt.Fprintf(os.Stderr, "oci-registry: %d tokens issued\n", issued.Load())
	}
}
