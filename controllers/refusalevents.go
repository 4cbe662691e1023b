package controllers

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// An upstream controller whose write the fleet refused reports it as it
// reports any failed write, in a Warning Event on its object
// ("ReplicaSetCreateError: Failed to create new replica set ...: this
// replica does not run the namespace's partition (it moved); write
// refused"), and its event broadcaster sends that Event later, from its
// own queue: after a handover that gave the partition back to the same
// replica (as when a starting fleet's views settle), or once authority
// came back, the Event lands on the user's object. It reports the
// fleet's handover, not the object: KCM, which exits when it loses its
// lease, never writes one, and the refusal is in the replica's log
// already. So the write path drops an Event whose message carries one of
// the fleet's refusals, answering as the apiserver answers an Event that
// exists already, which the broadcaster drops without retrying or
// logging above V(5).

// fleetRefusals are the messages of the writes the fleet refuses or
// abandons.
var fleetRefusals = [][]byte{
	[]byte(ErrNoAuthority.Error()),
	[]byte(ErrPartitionMoved.Error()),
	[]byte(ErrPieceStopped.Error()),
	[]byte(ErrWriteAbandoned.Error()),
}

var refusalEventsDropped = metrics.NewCounter(&metrics.CounterOpts{
	Namespace: "fleet", Name: "refusal_events_dropped_total",
	Help:           "Events not written because their message reports a write this replica refused (its authority ran out, or the piece or partition had stopped here).",
	StabilityLevel: metrics.ALPHA,
})

// isEventWrite says whether path names Events (core or events.k8s.io), a
// collection or one of them.
func isEventWrite(method, path string) bool {
	if method != http.MethodPost && method != http.MethodPut && method != http.MethodPatch {
		return false
	}
	group, rest, ok := splitAPIPath(path)
	if !ok || group != "" && group != "events.k8s.io" {
		return false
	}
	return len(rest) >= 3 && len(rest) <= 4 && rest[0] == "namespaces" && rest[2] == "events"
}

// refusalEvent reads the body of an Event write and says whether it
// reports one of the fleet's refusals; the request it returns carries the
// body again for sending.
func refusalEvent(req *http.Request) (*http.Request, bool, error) {
	if req.Body == nil || req.Body == http.NoBody || !isEventWrite(req.Method, req.URL.Path) {
		return req, false, nil
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, false, fmt.Errorf("reading the Event of %s %s: %w", req.Method, req.URL.Path, err)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	for _, refusal := range fleetRefusals {
		if bytes.Contains(body, refusal) {
			return out, true, nil
		}
	}
	return out, false, nil
}

// refusalEventDropped answers a dropped Event as kube-apiserver answers
// one that exists already: 409, reason AlreadyExists.
func refusalEventDropped(req *http.Request) *http.Response {
	refusalEventsDropped.Inc()
	klog.FromContext(req.Context()).V(2).Info("Dropped an Event reporting a write this replica refused", "method", req.Method, "path", req.URL.Path)
	return statusResponse(req, metav1.Status{
		Message: "the Event reports a write this fleet replica refused; not written",
		Reason:  metav1.StatusReasonAlreadyExists,
		Details: &metav1.StatusDetails{Kind: "events"},
		Code:    http.StatusConflict,
	})
}
