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
	"time"

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
// as an error from the transport would be.
func partitionMovedResponse(req *http.Request, namespace string) *http.Response {
	if req.Body != nil {
		req.Body.Close()
	}
	return statusResponse(req, metav1.Status{
		Message: fmt.Sprintf("%s: %s %s", ErrPartitionMoved, req.Method, req.URL.Path),
		Reason:  metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{Name: namespace, Kind: "namespaces"},
		Code:    http.StatusNotFound,
	})
}

// statusResponse answers req here, as kube-apiserver answers a failed
// request: status (its Code, Reason, Message and Details) as JSON.
func statusResponse(req *http.Request, status metav1.Status) *http.Response {
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	status.Status = metav1.StatusFailure
	body, _ := json.Marshal(status)
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status.Code, http.StatusText(int(status.Code))), StatusCode: int(status.Code),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// writeGate lets one run of one piece write: it opens once, when the
// run may act (a partition once gained, a singleton once started), shuts
// once, when the run stops, and never opens again after that, so a gain
// still loading when its run stopped cannot open it behind the stop. It
// counts the writes it admitted until they are answered.
//
// It is why a piece can count as stopped before every one of its
// controllers has returned: upstream controllers still make some calls
// with context.TODO(), which wait their turn at a saturated client rate
// limiter (seconds) after the piece's context is cancelled. Once the gate
// is shut and the writes already sent have been answered, nothing the old
// controllers do can reach the apiserver, so the new owner may start while
// they wind down. Writes are checked after the rate limiter, at the
// transport, so a call that was waiting there is refused when its turn
// comes.
//
// A gate shut for a handover keeps a report tail: it still admits Event
// writes until its tail has passed since the last write it admitted was
// answered, and is drained only after that. An upstream controller
// records an Event once the write it reports has returned, and its
// broadcaster sends it from a queue of its own, so the report of a write
// admitted just before the stop (a Deployment's ScalingReplicaSet, a
// Job's SuccessfulCreate) reaches the transport just after it; refused,
// it would be lost for good, since the next owner finds the work done and
// reports nothing (the end-state comparison with KCM caught a Deployment
// without its ScalingReplicaSet). The next owner starts once the gate is
// drained, so the reports still land inside this run; a gate idle for
// longer than its tail drains as it shuts.
type writeGate struct {
	mu   sync.Mutex
	open bool
	shut bool
	// tail: how long after the last answered write a shut gate admits
	// Events (0: none).
	tail         time.Duration
	lastAnswered time.Time
	inflight     int
	drained      bool
	tailTimer    *time.Timer
	// idle is closed once the gate is shut, no write is in flight and its
	// tail is over.
	idle chan struct{}
}

// reportTail is the report tail of a gate shut for a handover: on the
// 2-core test machine an Event is sent within milliseconds of the write
// it reports; the tail leaves room for a loaded replica, and delays the
// handover of a partition only if it wrote in its last quarter second.
const reportTail = 250 * time.Millisecond

func newWriteGate() *writeGate { return &writeGate{idle: make(chan struct{})} }

// Open lets writes through, unless the gate was shut already; false if
// it did not open.
func (g *writeGate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return false
	}
	g.open = true
	return true
}

// Shut refuses every new write from now on, for good, but the Events of
// the report tail (0 for none: a stop for lost authority). Drained says
// when the writes already admitted have been answered and the tail is
// over.
func (g *writeGate) Shut(tail time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return
	}
	g.open, g.shut, g.tail = false, true, tail
	g.settleLocked()
}

// settleLocked closes idle once the gate is shut, nothing is in flight
// and the tail is over, or looks again when the tail ends.
func (g *writeGate) settleLocked() {
	if !g.shut || g.drained || g.inflight > 0 {
		return
	}
	if wait := g.tail - time.Since(g.lastAnswered); g.tail > 0 && wait > 0 {
		if g.tailTimer == nil {
			g.tailTimer = time.AfterFunc(wait, func() {
				g.mu.Lock()
				defer g.mu.Unlock()
				g.tailTimer = nil
				g.settleLocked()
			})
		}
		return
	}
	g.drained = true
	close(g.idle)
}

// Drained is closed once the gate is shut, every write it admitted has
// been answered and its report tail is over.
func (g *writeGate) Drained() <-chan struct{} { return g.idle }

// IsOpen reports whether the gate lets writes through now.
func (g *writeGate) IsOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// admit reserves a write, an Event if report (admitted in the tail too);
// done must be called once the apiserver has answered it.
func (g *writeGate) admit(report bool) (done func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.admitsLocked(report) {
		return nil, false
	}
	g.inflight++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.inflight--
		if !report {
			// The Event reporting it may follow: the tail runs from here.
			g.lastAnswered = time.Now()
		}
		g.settleLocked()
	}, true
}

// admits says whether admit would let a write through now.
func (g *writeGate) admits(report bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.admitsLocked(report)
}

// admitsLocked: open, or an Event (report) within a shut gate's tail.
// Called with mu held.
func (g *writeGate) admitsLocked(report bool) bool {
	return g.open || report && g.shut && !g.drained && g.tail > 0
}

// namespaceGates finds the write gate of the run that may write into a
// namespace now (the partition table), or, for an Event (report), of the
// run that stopped serving it while its report tail lasts; nil when none
// may.
type namespaceGates interface {
	gateOf(namespace string, report bool) *writeGate
}

// requestNamespace is the namespace a request to the Kubernetes API acts
// in, or "" for cluster-scoped requests (including those on Namespace
// objects themselves).
func requestNamespace(path string) string {
	if _, rest, ok := splitAPIPath(path); ok && len(rest) >= 3 && rest[0] == "namespaces" {
		return rest[1]
	}
	return ""
}

// splitAPIPath splits a Kubernetes API path into its group ("" for the
// core API) and what follows the version:
// /api/v1/REST... or /apis/GROUP/VERSION/REST...
func splitAPIPath(path string) (group string, rest []string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		return "", parts[2:], true
	case len(parts) >= 3 && parts[0] == "apis":
		return parts[1], parts[3:], true
	}
	return "", nil, false
}

func isWrite(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// fencedRoundTripper refuses every write once the replica may no longer
// act, a singleton's every write once its run has stopped and, for
// partition controllers, every write into a namespace whose partition this
// replica does not serve.
type fencedRoundTripper struct {
	next http.RoundTripper
	// write, when set, is where writes go out instead of next: connections
	// that send nothing once authority has run out (writeTransports).
	write      http.RoundTripper
	fence      shard.Authority
	partitions namespaceGates
	// run is a singleton piece's run: every write, namespaced or not, is
	// admitted only while its gate is open.
	run *writeGate
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
	req, refusal, err := refusalEvent(req)
	if err != nil {
		return nil, err
	}
	if refusal {
		return refusalEventDropped(req), nil
	}
	report := isEventWrite(req.Method, req.URL.Path)
	if f.fence != nil && !f.fence.Valid() {
		return f.refuseWithoutAuthority(req, report)
	}
	var answered []func()
	if f.run != nil {
		done, ok := f.run.admit(report)
		if !ok {
			return nil, fmt.Errorf("%w: %s %s", ErrPieceStopped, req.Method, req.URL.Path)
		}
		answered = append(answered, done)
	}
	if f.partitions != nil {
		if ns := requestNamespace(req.URL.Path); ns != "" {
			var done func()
			ok := false
			if gate := f.partitions.gateOf(ns, report); gate != nil {
				done, ok = gate.admit(report)
			}
			if !ok {
				for _, done := range answered {
					done()
				}
				return partitionMovedResponse(req, ns), nil
			}
			answered = append(answered, done)
		}
	}
	next := f.next
	if f.write != nil {
		next = f.write
	}
	if f.fence == nil {
		// Nothing bounds a write kept past its caller: it ends with it.
		defer func() {
			for _, done := range answered {
				done()
			}
		}()
		return next.RoundTrip(req)
	}
	// Answered once the response headers are in: the apiserver has acted
	// (or refused) by then.
	return sendAdmitted(req, answered, func(req *http.Request) (*http.Response, error) {
		return abandonAtDeadline(req, f.fence, next)
	})
}

// refuseWithoutAuthority refuses a write made without authority. One into
// a namespace whose partition no longer runs here is answered as moved,
// as it is with authority: a replica leaving the fleet stops every
// partition before it leaves, and its partition controllers, draining
// their queues until the process exits, then drop such keys instead of
// retrying each with backoff and logging every refusal.
func (f fencedRoundTripper) refuseWithoutAuthority(req *http.Request, report bool) (*http.Response, error) {
	if ns := requestNamespace(req.URL.Path); f.partitions != nil && ns != "" {
		if gate := f.partitions.gateOf(ns, report); gate == nil || !gate.admits(report) {
			return partitionMovedResponse(req, ns), nil
		}
	}
	return nil, ErrNoAuthority
}

// sendAdmitted sends an admitted write and reports it answered (each of
// answered) only once the apiserver has answered it, or its connection
// was reset when authority ran out (abandonAtDeadline bounds it). A
// caller that gives up on it, its piece stopping, gets its error at once,
// but the write is not cancelled: an HTTP/2 cancel is a stream reset sent
// behind the request's own bytes, which the apiserver may still act on,
// so counting a write answered at its cancel would let the piece count as
// ended, and the next owner start, before the write arrives.
func sendAdmitted(req *http.Request, answered []func(), send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	type result struct {
		resp *http.Response
		err  error
	}
	caller := req.Context()
	results := make(chan result, 1)
	go func() {
		resp, err := send(req.WithContext(context.WithoutCancel(caller)))
		for _, done := range answered {
			done()
		}
		results <- result{resp, err}
	}()
	select {
	case r := <-results:
		return r.resp, r.err
	case <-caller.Done():
		go func() {
			if r := <-results; r.resp != nil {
				_, _ = io.Copy(io.Discard, r.resp.Body)
				r.resp.Body.Close()
			}
		}()
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, context.Cause(caller))
	}
}
