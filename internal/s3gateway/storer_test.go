package s3gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/versity/versitygw/iamapi/storage"
)

// userStoreOverrides are the versitygw Storer methods userStore implements
// itself: every one that names, finds or changes a user, or a user's keys,
// tags or policies, so that it reaches that user's own store.
var userStoreOverrides = []string{
	"CreateUser", "DeleteUser", "GetUser", "GetUserByAccessKeyID", "ListUsers", "UpdateUser",
	"TagUser", "UntagUser", "ListUserTags",
	"CreateAccessKey", "UpdateAccessKey", "DeleteAccessKey", "GetAccessKeyLastUsed", "ListAccessKeys", "RecordAccessKeyUsage",
	"PutUserPolicy", "GetUserPolicy", "DeleteUserPolicy", "ListUserPolicies",
}

// userStorePassThrough are the Storer methods the embedded root store
// serves: roles, OIDC providers and sessions, which are not per user.
var userStorePassThrough = []string{
	"CreateRole", "GetRole", "ListRoles", "DeleteRole", "UpdateAssumeRolePolicy", "RecordRoleUsage",
	"TagRole", "UntagRole", "ListRoleTags",
	"PutRolePolicy", "GetRolePolicy", "DeleteRolePolicy", "ListRolePolicies",
	"CreateOIDCProvider", "GetOIDCProvider", "ListOIDCProviders", "DeleteOIDCProvider",
	"AddClientIDToOIDCProvider", "RemoveClientIDFromOIDCProvider", "UpdateOIDCProviderThumbprint",
	"TagOIDCProvider", "UntagOIDCProvider", "ListOIDCProviderTags",
	"CreateSession", "GetSession",
}

// declaredOn lists the methods this package's non-test files declare on
// *recv, read from the source: a method promoted from an embedded field is
// not one of them.
func declaredOn(t *testing.T, recv string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	// This file's folder, not ".": versitygw's posix backend changes the
	// process's working directory to its root (another test's, perhaps
	// removed by now).
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find this test's source file")
	}
	dir := filepath.Dir(self)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == recv {
					methods[fn.Name.Name] = true
				}
			}
		}
	}
	return methods
}

// TestUserStoreOverrides pins which methods of versitygw's Storer
// userStore implements and which it passes to the embedded root store. A
// versitygw upgrade that adds a method to Storer fails it: a user method
// left to the embedded store would read and write the root's iam.json,
// bypassing the per-user stores and the indexes, without a compile error
// (the embedded interface supplies it). Decide where the new method goes,
// implement it if it is a user's, and add it to one of the lists.
func TestUserStoreOverrides(t *testing.T) {
	storer := reflect.TypeFor[storage.Storer]()
	declared := declaredOn(t, "userStore")
	var overrides, passThrough []string
	for i := range storer.NumMethod() {
		name := storer.Method(i).Name
		if declared[name] {
			overrides = append(overrides, name)
		} else {
			passThrough = append(passThrough, name)
		}
	}
	want := slices.Sorted(slices.Values(userStoreOverrides))
	if !slices.Equal(overrides, want) {
		t.Errorf("userStore implements the Storer methods\n  %v\nwant\n  %v", overrides, want)
	}
	want = slices.Sorted(slices.Values(userStorePassThrough))
	if !slices.Equal(passThrough, want) {
		t.Errorf("userStore passes the Storer methods\n  %v\nto the embedded root store, want\n  %v\n"+
			"(a method new in versitygw: implement it here if it concerns a user, then list it)", passThrough, want)
	}
	for _, name := range passThrough {
		if strings.Contains(name, "User") || strings.Contains(name, "AccessKey") {
			t.Errorf("Storer.%s concerns users but reaches the root store: userStore must implement it", name)
		}
	}
	if n := len(userStoreOverrides) + len(userStorePassThrough); n != storer.NumMethod() {
		t.Errorf("the lists hold %d methods, Storer has %d", n, storer.NumMethod())
	}
}
