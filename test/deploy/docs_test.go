package deploy

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// docCommands returns the shell commands in the ```sh blocks of a
// document, continuation lines joined and comments cut.
func docCommands(t *testing.T, doc string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, cont := false, ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		if cmd := strings.TrimSpace(cont + line); cmd != "" {
			cmds = append(cmds, cmd)
		}
		cont = ""
	}
	return cmds
}

// TestDocumentedInstall does what README's Deploy and Kubernetes sections
// and docs/kubernetes.md tell an operator to do to install, against a real
// kube-apiserver: each `helm install`/`helm upgrade` is rendered by the real
// helm with the same release, namespace and values and applied; each
// `kubectl apply -f` applies those files; `kubectl create secret generic`
// makes that Secret. A command the API server rejects, or a file the docs
// name that is not there, fails. (`make image` is what the image tests
// build; reading commands such as `kubectl get` are left out.)
func TestDocumentedInstall(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, doc := range []string{"README.md", "docs/kubernetes.md"} {
		ran := 0
		for _, cmd := range docCommands(t, doc) {
			f := strings.Fields(cmd)
			switch {
			case len(f) >= 4 && f[0] == "helm" && (f[1] == "install" || f[1] == "upgrade"):
				release, chart := f[2], f[3]
				if chart != "charts/bucketbroker" {
					t.Errorf("%s: %q installs %s, not charts/bucketbroker", doc, cmd, chart)
					continue
				}
				ns, set := "default", []string{}
				for i := 4; i < len(f); i++ {
					switch {
					case (f[i] == "-n" || f[i] == "--namespace") && i+1 < len(f):
						ns = f[i+1]
						i++
					case f[i] == "--create-namespace":
						set = append(set, "createNamespace=true")
					case f[i] == "--set" && i+1 < len(f):
						set = append(set, f[i+1])
						i++
					default:
						t.Errorf("%s: %q: the test does not know %s", doc, cmd, f[i])
					}
				}
				apply(ctx, t, render(t, release, ns, set...))
			case len(f) >= 3 && f[0] == "kubectl" && f[1] == "apply":
				var objs []*unstructured.Unstructured
				for i := 2; i < len(f); i++ {
					if f[i] != "-f" || i+1 >= len(f) {
						continue
					}
					i++
					objs = append(objs, manifests(t, f[i])...)
				}
				applyClientSide(ctx, t, objs)
			case len(f) >= 6 && f[0] == "kubectl" && f[1] == "-n" && f[3] == "create" && f[4] == "secret" && f[5] == "generic":
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f[2], Name: f[6]}, StringData: map[string]string{}}
				for _, a := range f[7:] {
					if kv, ok := strings.CutPrefix(a, "--from-literal="); ok {
						k, v, _ := strings.Cut(kv, "=")
						s.StringData[k] = v
					}
				}
				if err := admin.Create(ctx, s); err != nil {
					t.Fatalf("%s: %q: %v", doc, cmd, err)
				}
			default:
				continue
			}
			ran++
			t.Logf("%s: %s", doc, cmd)
		}
		if ran == 0 {
			t.Errorf("%s: no install command found", doc)
		}
	}
}

// applyClientSide applies objs as `kubectl apply` does by default (client
// side): a create, or an update of what is there. Unlike server-side apply
// it sends a null field as written, and the API server prunes it (the
// sample claim's additionalConfig, TestManifestsAccepted).
func applyClientSide(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for pass := 0; pass <= 2; pass++ {
		for _, o := range objs {
			if rank(o) != pass {
				continue
			}
			obj := o.DeepCopy()
			err := admin.Create(ctx, obj)
			if apierrors.IsAlreadyExists(err) {
				cur := o.DeepCopy()
				if err = admin.Get(ctx, client.ObjectKeyFromObject(o), cur); err == nil {
					obj.SetResourceVersion(cur.GetResourceVersion())
					err = admin.Update(ctx, obj)
				}
			}
			if err != nil {
				t.Fatalf("kubectl apply of %s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
			if pass == 0 {
				waitEstablished(ctx, t, o.GetName())
			}
		}
	}
}

// manifests reads the objects of a file, or of every .yaml file of a
// directory, as kubectl apply -f does.
func manifests(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	full := filepath.Join(root, path)
	files := []string{full}
	if fi, err := os.Stat(full); err != nil {
		t.Fatalf("the docs apply %s: %v", path, err)
	} else if fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(full, "*.yaml"))
	}
	var objs []*unstructured.Unstructured
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for doc := range bytes.SplitSeq(data, []byte("\n---")) {
			var m map[string]any
			if err := yaml.Unmarshal(doc, &m); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(m) > 0 {
				objs = append(objs, &unstructured.Unstructured{Object: m})
			}
		}
	}
	return objs
}
