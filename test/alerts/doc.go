// Package alerts tests the chart's alert rules
// (charts/bucketbroker/files/alerts.yaml) with promtool: the file loads,
// and each alert fires on the series of alerts_test.yaml that should fire
// it and on no other. promtool comes from Debian's prometheus package
// (hack/tools.sh installs it); without it the test skips, except in CI.
// That every metric the rules and the dashboard query is one the broker
// exports is checked in internal/broker (TestMonitoringNamesExportedMetrics).
package alerts
