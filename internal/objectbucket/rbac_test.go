package objectbucket

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
)

// TestRBACSuffices runs the controller as a user bound only to the
// ClusterRole in config/rbac/role.yaml through a whole claim lifecycle.
func TestRBACSuffices(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal([]byte(string(data[:indexOf(data, "\n---")])), &role); err != nil {
		t.Fatal(err)
	}
	role.Name = "bucketbroker-controller-" + randomHex(4)
	create(ctx, t, &role)
	user := "rbac-test-" + randomHex(4)
	create(ctx, t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	})
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner(), impersonate: user})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "rbac", class, nil)
	create(ctx, t, obc)
	waitPhase(ctx, t, obc, obv1.PhaseBound)
	checkCredentials(ctx, t, readBinding(ctx, t, obc), "")
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
}

func indexOf(b []byte, sep string) int {
	for i := 0; i+len(sep) <= len(b); i++ {
		if string(b[i:i+len(sep)]) == sep {
			return i
		}
	}
	return len(b)
}
