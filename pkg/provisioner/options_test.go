package provisioner

import (
	"reflect"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/objectbucket"
)

// reconcilerOnly lists the reconciler's options that vendors are not
// offered, and why.
var reconcilerOnly = map[string]string{
	"SkipNameValidation": "several managers in one process: tests only",
}

// TestOptionsReachTheReconciler pins Options.reconciler: each field of
// Options, set alone, reaches exactly one field of objectbucket.Options
// with its value, and each field of objectbucket.Options is reached by one
// of Options or listed in reconcilerOnly. A field added to either and not
// carried over fails it.
func TestOptionsReachTheReconciler(t *testing.T) {
	reached := map[string]string{}
	pt := reflect.TypeOf(Options{})
	for i := range pt.NumField() {
		var o Options
		f := reflect.ValueOf(&o).Elem().Field(i)
		setNonZero(t, pt.Field(i).Name, f, i)
		got := reflect.ValueOf(o.reconciler())
		var to []string
		for j := range got.NumField() {
			if !got.Field(j).IsZero() {
				to = append(to, got.Type().Field(j).Name)
			}
		}
		if len(to) != 1 {
			t.Errorf("Options.%s reaches objectbucket.Options fields %v, want exactly one: carry it over in Options.reconciler", pt.Field(i).Name, to)
			continue
		}
		if v := got.FieldByName(to[0]).Interface(); !reflect.DeepEqual(v, f.Interface()) {
			t.Errorf("Options.%s = %v reaches objectbucket.Options.%s as %v", pt.Field(i).Name, f.Interface(), to[0], v)
		}
		if prev, dup := reached[to[0]]; dup {
			t.Errorf("Options.%s and Options.%s both reach objectbucket.Options.%s", prev, pt.Field(i).Name, to[0])
		}
		reached[to[0]] = pt.Field(i).Name
	}
	ot := reflect.TypeOf(objectbucket.Options{})
	for j := range ot.NumField() {
		name := ot.Field(j).Name
		_, internal := reconcilerOnly[name]
		switch {
		case reached[name] == "" && !internal:
			t.Errorf("objectbucket.Options.%s is not offered by Options: add it and carry it over in Options.reconciler, or list it in reconcilerOnly with the reason", name)
		case reached[name] != "" && internal:
			t.Errorf("objectbucket.Options.%s is listed in reconcilerOnly but Options.%s reaches it", name, reached[name])
		}
	}
}

// setNonZero sets f, field number i, to a value no other field gets.
func setNonZero(t *testing.T, name string, f reflect.Value, i int) {
	t.Helper()
	switch f.Kind() {
	case reflect.String:
		f.SetString("v" + string(rune('a'+i)))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f.SetInt(int64(i + 1))
	case reflect.Bool:
		f.SetBool(true)
	default:
		t.Fatalf("Options.%s is a %s: teach setNonZero to set it", name, f.Kind())
	}
}
