package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// ErrPartitionMoved is the message of the answer to a write by a partition
// controller into a namespace whose partition this replica does not run
// (any more).
var ErrPartitionMoved = errors.New("this replica does not run the namespace's partition (it moved); write refused")

// partitionMovedResponse answers a write into a namespace this replica
// does not serve as kube-apiserver answers a write into a namespace that
// does not exist: 404, reason NotFound, details naming the namespace.
// That is what the namespace is to the controllers here (its objects left
// their informers when its partition moved), and how upstream controllers
// learn to stop: a key queued by the move's deletions (the root-CA
// publisher recreating the ConfigMap it saw deleted, for one) is dropped
// instead of retried with backoff for as long as the partition stays away,
// as an error from the transport is (about 480 logged refusals per replica
// in the benchmark's rolling restart of five, against about 70 answered so:
// docs/benchmarks/refused-writes).
func partitionMovedResponse(req *http.Request, namespace string) *http.Response {
	if req.Body != nil {
		req.Body.Close()
	}
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  fmt.Sprintf("%s: %s %s", ErrPartitionMoved, req.Method, req.URL.Path),
		Reason:   metav1.StatusReasonNotFound,
		Details:  &metav1.StatusDetails{Name: namespace, Kind: "namespaces"},
		Code:     http.StatusNotFound,
	}
	body, _ := json.Marshal(status)
	return &http.Response{
		Status: "404 Not Found", StatusCode: http.StatusNotFound,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// partitionFence says which namespace partitions this replica may write
// into, and counts the writes in flight into each.
//
// It is why a partition piece can count as stopped before every one of its
// controllers has returned: upstream controllers still make some calls with
// context.TODO(), which wait their turn at a saturated client rate limiter
// (seconds) after the piece's context is cancelled. Once the fence is
// closed and the writes already sent have been answered, nothing the old
// controllers do can reach the apiserver, so the new owner may start while
// they wind down. Writes are checked after the rate limiter, at the
// transport, so a call that was waiting there is refused when its turn
// comes.
type partitionFence struct {
	partitionOf func(namespace string) int

	mu       sync.Mutex
	open     map[int]bool
	inflight map[int]int
	idle     map[int]chan struct{} // closed when inflight drops to 0
}

func newPartitionFence(partitionOf func(string) int) *partitionFence {
	return &partitionFence{partitionOf: partitionOf, open: map[int]bool{}, inflight: map[int]int{}, idle: map[int]chan struct{}{}}
}

// Open lets writes into partition p through, unless the piece it opens
// for has stopped: a stop revokes the gate (Revoke) after it cancels
// ctx, and the check here holds the lock Revoke takes, so a gain that
// was loading when its piece stopped cannot open the gate behind the
// stop. False if it did not open.
func (f *partitionFence) Open(ctx context.Context, p int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	f.open[p] = true
	return true
}

// Revoke refuses every new write into partition p from now on, without
// waiting for those in flight (Close waits).
func (f *partitionFence) Revoke(p int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.open, p)
}

// Close refuses every new write into partition p and returns once the
// writes already admitted have been answered (or ctx ends).
func (f *partitionFence) Close(ctx context.Context, p int) error {
	f.mu.Lock()
	delete(f.open, p)
	if f.inflight[p] == 0 {
		f.mu.Unlock()
		return nil
	}
	idle, ok := f.idle[p]
	if !ok {
		idle = make(chan struct{})
		f.idle[p] = idle
	}
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for writes into partition %d to finish: %w", p, ctx.Err())
	}
}

// admit reserves a write into namespace ns; done must be called once the
// apiserver has answered.
func (f *partitionFence) admit(ns string) (done func(), ok bool) {
	p := f.partitionOf(ns)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open[p] {
		return nil, false
	}
	f.inflight[p]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.inflight[p]--
		if f.inflight[p] == 0 {
			if idle, ok := f.idle[p]; ok {
				close(idle)
				delete(f.idle, p)
			}
		}
	}, true
}

// requestNamespace is the namespace a request to the Kubernetes API acts
// in, or "" for cluster-scoped requests (including those on Namespace
// objects themselves).
func requestNamespace(path string) string {
	// /api/v1/namespaces/NS/RESOURCE[/...] or
	// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/...]
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return ""
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		return rest[1]
	}
	return ""
}

func isWrite(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// fencedRoundTripper refuses every write once the replica may no longer
// act and, for partition controllers, every write into a namespace whose
// partition this replica does not run.
type fencedRoundTripper struct {
	next http.RoundTripper
	// write, when set, is where writes go out instead of next: connections
	// that send nothing once authority has run out (writeTransports).
	write      http.RoundTripper
	fence      shard.Authority
	partitions *partitionFence
	// run is a singleton piece's run: every write, namespaced or not, is
	// admitted only while it is open (one "partition", 0).
	run *partitionFence
}

// ErrPieceStopped is returned for a write by a singleton controller whose
// piece has stopped on this replica.
var ErrPieceStopped = errors.New("this replica no longer runs the controller's piece; write refused")

// ErrNoAuthority is returned for a write attempted without authority.
var ErrNoAuthority = fmt.Errorf("this replica's fleet authority has run out; write refused")

func (f fencedRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isWrite(req.Method) {
		return f.next.RoundTrip(req)
	}
	if f.fence != nil && !f.fence.Valid() {
		return nil, ErrNoAuthority
	}
	if f.run != nil {
		done, ok := f.run.admit("")
		if !ok {
			return nil, fmt.Errorf("%w: %s %s", ErrPieceStopped, req.Method, req.URL.Path)
		}
		defer done()
	}
	if f.partitions != nil {
		if ns := requestNamespace(req.URL.Path); ns != "" {
			done, ok := f.partitions.admit(ns)
			if !ok {
				return partitionMovedResponse(req, ns), nil
			}
			// Answered once the response headers are in: the apiserver
			// has acted (or refused) by then.
			defer done()
		}
	}
	next := f.next
	if f.write != nil {
		next = f.write
	}
	if f.fence != nil {
		return abandonAtDeadline(req, f.fence, next)
	}
	return next.RoundTrip(req)
}
