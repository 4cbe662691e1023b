//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestReceivedTimestamp is when the apiserver had the request;
	// StageTimestamp, at ResponseComplete, when it had answered it: a
	// write takes effect between the two.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

func readAudit(t *testing.T, path string, fn func(auditEvent)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening audit log: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			fn(e)
		}
	}
}

// leaseWrites counts successful Lease writes per fleet member (by user
// agent) between from and to.
func leaseWrites(t *testing.T, path string, from, to time.Time) map[string]int {
	out := map[string]int{}
	readAudit(t, path, func(e auditEvent) {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "leases" || e.StageTimestamp.Before(from) || e.StageTimestamp.After(to) {
			return
		}
		if e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 {
			return
		}
		if rest, ok := strings.CutPrefix(e.UserAgent, "fleet-controller-manager/"); ok {
			member, _, _ := strings.Cut(rest, "/")
			out[member]++
		}
	})
	return out
}
