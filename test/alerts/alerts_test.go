package alerts

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found: install Debian's prometheus package (hack/tools.sh does)")
		}
		t.Skip("promtool not found: install Debian's prometheus package (hack/tools.sh does)")
	}
	return path
}

// TestRulesLoad: promtool reads the chart's rule file without error.
func TestRulesLoad(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "../../charts/bucketbroker/files/alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestRulesFire runs alerts_test.yaml: each alert fires on the series
// that should fire it, with its labels and annotations, and not on the
// others.
func TestRulesFire(t *testing.T) {
	rules, err := os.ReadFile("../../charts/bucketbroker/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\S+)`).FindAllSubmatch(tests, -1) {
		tested[string(m[1])] = true
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllSubmatch(rules, -1)
	if len(alerts) == 0 {
		t.Fatal("no alert found in the rule file")
	}
	for _, m := range alerts {
		if !tested[string(m[1])] {
			t.Errorf("alert %s has no test in alerts_test.yaml", m[1])
		}
	}
	out, err := exec.Command(promtool(t), "test", "rules", "alerts_test.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
