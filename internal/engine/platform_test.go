package engine_test

import (
	"net/http"
	"testing"
)

// TestLastOperationUnknownOperation: an operation id the resource never had
// is the request's mistake (400); 404 is kept for a resource that does not
// exist, which a platform takes as "gone".
func TestLastOperationUnknownOperation(t *testing.T) {
	h := newHarness(t)
	inst := instancePth + newID()
	h.want(h.do("PUT", inst, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	bind := inst + "/service_bindings/" + newID()
	h.want(h.do("PUT", bind, bindBody(planStd, nil)), http.StatusCreated, "bind")
	for _, path := range []string{inst, bind} {
		r := h.want(h.do("GET", path+"/last_operation?operation=never-started", nil), http.StatusBadRequest, "unknown operation of "+path)
		if r.str("description") == "" {
			t.Errorf("%s: 400 without a description", path)
		}
		h.want(h.do("GET", path+"/last_operation", nil), http.StatusOK, "no operation named: the latest one")
	}
	h.want(h.do("GET", instancePth+newID()+"/last_operation?operation=x", nil), http.StatusNotFound, "unknown instance")
	h.want(h.do("GET", inst+"/service_bindings/"+newID()+"/last_operation?operation=x", nil), http.StatusNotFound, "unknown binding")
}
