package controllers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

func TestRequestNamespace(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/api/v1/namespaces/team-a/pods", "team-a"},
		{"/api/v1/namespaces/team-a/pods/web-1/status", "team-a"},
		{"/apis/apps/v1/namespaces/team-b/replicasets/web", "team-b"},
		{"/apis/events.k8s.io/v1/namespaces/team-c/events", "team-c"},
		{"/api/v1/namespaces/team-a", ""}, // the Namespace object itself
		{"/api/v1/namespaces", ""},
		{"/api/v1/persistentvolumes/pv-1", ""},
		{"/apis/resource.k8s.io/v1beta2/devicetaintrules/r/status", ""},
		{"/healthz", ""},
		{"/", ""},
	} {
		if got := requestNamespace(tc.path); got != tc.want {
			t.Errorf("requestNamespace(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// gatesByPartition is a namespaceGates of fixed gates: namespace
// "one-*" is partition 1, every other partition 2.
type gatesByPartition map[int]*writeGate

func (g gatesByPartition) gateOf(ns string, _ bool) *writeGate {
	if strings.HasPrefix(ns, "one") {
		return g[1]
	}
	return g[2]
}

// TestPartitionWriteGate: writes into a namespace go through only while
// the gate of its partition's run is open; Shut refuses new ones at once
// and Drained waits until the writes already sent have been answered; a
// shut gate never opens again; reads and cluster-scoped writes are not
// the gate's business.
func TestPartitionWriteGate(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if strings.Contains(r.URL.Path, "/slow/") {
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer server.Close()
	gates := gatesByPartition{1: newWriteGate(), 2: newWriteGate()}
	do := requester(t, fencedRoundTripper{next: http.DefaultTransport, partitions: gates}, server.URL)

	for _, tc := range []struct {
		name, method, path string
		refused            bool
	}{
		{"write before the gate opens", http.MethodPost, "/api/v1/namespaces/one-a/pods", true},
		{"read before the gate opens", http.MethodGet, "/api/v1/namespaces/one-a/pods", false},
		{"cluster-scoped write", http.MethodPatch, "/api/v1/persistentvolumes/pv", false},
	} {
		err := do(tc.method, tc.path)
		if refused := errors.Is(err, ErrPartitionMoved); refused != tc.refused {
			t.Errorf("%s: err %v, refused %v, want %v", tc.name, err, refused, tc.refused)
		}
	}

	gates[1].Open()
	if err := do(http.MethodPut, "/api/v1/namespaces/one-a/pods/p"); err != nil {
		t.Fatalf("write through an open gate: %v", err)
	}
	if err := do(http.MethodPut, "/api/v1/namespaces/two-a/pods/p"); !errors.Is(err, ErrPartitionMoved) {
		t.Fatalf("write into another partition: %v, want refused", err)
	}

	// A write in flight holds Drained until it is answered.
	inFlight := make(chan error, 1)
	go func() { inFlight <- do(http.MethodPost, "/api/v1/namespaces/one-b/slow/x") }()
	for served.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	gates[1].Shut(0)
	select {
	case <-gates[1].Drained():
		t.Fatal("drained while a write was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	// Refused at once while it waits, and for good.
	if err := do(http.MethodDelete, "/api/v1/namespaces/one-c/pods/p"); !errors.Is(err, ErrPartitionMoved) {
		t.Errorf("write after Shut: %v, want refused", err)
	}
	if gates[1].Open() {
		t.Error("a shut gate opened again")
	}
	close(release)
	if err := <-inFlight; err != nil {
		t.Errorf("the write in flight: %v", err)
	}
	select {
	case <-gates[1].Drained():
	case <-time.After(5 * time.Second):
		t.Fatal("not drained after the write in flight was answered")
	}
}

// TestSingletonWriteGate: a singleton's every write, namespaced or not,
// goes through only while its run's gate is open.
func TestSingletonWriteGate(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer server.Close()
	run := newWriteGate()
	do := requester(t, fencedRoundTripper{next: http.DefaultTransport, run: run}, server.URL)
	requests := []struct {
		name, method, path string
		write              bool
	}{
		{"namespaced write", http.MethodPost, "/api/v1/namespaces/a/events", true},
		{"cluster-scoped write", http.MethodPatch, "/api/v1/nodes/n", true},
		{"read", http.MethodGet, "/api/v1/nodes/n", false},
	}
	for _, phase := range []struct {
		name string
		set  func()
		open bool
	}{
		{"before the run", func() {}, false},
		{"while it runs", func() { run.Open() }, true},
		{"after it ended", func() { run.Shut(0) }, false},
	} {
		phase.set()
		for _, tc := range requests {
			err := do(tc.method, tc.path)
			wantRefused := tc.write && !phase.open
			if refused := errors.Is(err, ErrPieceStopped); refused != wantRefused || (!refused && err != nil) {
				t.Errorf("%s, %s: err %v, want refused %v", phase.name, tc.name, err, wantRefused)
			}
		}
	}
}

// requester sends requests through transport to base and returns their
// errors.
func requester(t *testing.T, transport http.RoundTripper, base string) func(method, path string) error {
	client := &http.Client{Transport: transport}
	return func(method, path string) error {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusNotFound && strings.Contains(string(body), ErrPartitionMoved.Error()) {
			return ErrPartitionMoved
		}
		return nil
	}
}

// authorityBack is a replica's authority that lapsed and came back: Valid
// says yes again.
type authorityBack struct{}

func (authorityBack) Valid() bool                  { return true }
func (authorityBack) Authority() (bool, time.Time) { return true, time.Now().Add(time.Minute) }

// TestStoppedPieceWritesNothing: once Runtime.Stop has returned for a
// piece none of its writes is sent, even with the replica's authority
// back and before the piece is reported ended; and a gain that was still
// loading when its piece stopped cannot open the gate behind the stop.
func TestStoppedPieceWritesNothing(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer server.Close()
	table := newTestTable(t)
	r := &Runtime{table: table.partitionTable, ended: table.ended}
	singleton := shard.SingletonPiece("namespace-controller")
	run := &singletonRun{cancel: func() {}, gate: newWriteGate()}
	r.singletons.add(singleton, run)
	partitionWrite := requester(t, fencedRoundTripper{next: http.DefaultTransport, fence: authorityBack{}, partitions: r.table}, server.URL)
	singletonWrite := requester(t, fencedRoundTripper{next: http.DefaultTransport, fence: authorityBack{}, run: run.gate}, server.URL)
	for _, tc := range []struct {
		name  string
		piece shard.Piece
		write func() error
		// start starts the piece; reopen tries to open its gate again.
		start, reopen func()
		err           error
	}{
		{"partition", shard.PartitionPiece(3), func() error { return partitionWrite(http.MethodPost, "/api/v1/namespaces/ns-3/pods") },
			func() { r.Start([]shard.Piece{shard.PartitionPiece(3)}); table.reconcile(t.Context()) },
			func() { table.serve(3) }, ErrPartitionMoved},
		{"singleton", singleton, func() error { return singletonWrite(http.MethodPost, "/api/v1/namespaces/a/pods") },
			func() { run.gate.Open() }, func() { run.gate.Open() }, ErrPieceStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.start()
			if err := tc.write(); err != nil {
				t.Fatalf("a write of the running piece: %v", err)
			}
			r.Stop([]shard.Piece{tc.piece}, true)
			if err := tc.write(); !errors.Is(err, tc.err) {
				t.Errorf("a write after the stop: %v, want %v", err, tc.err)
			}
			tc.reopen()
			if err := tc.write(); !errors.Is(err, tc.err) {
				t.Errorf("a write after a late open: %v, want %v", err, tc.err)
			}
		})
	}
}

// countingServer answers every request 200 and counts them.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var served atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(server.Close)
	return server, &served
}

// TestPartitionMovedReadsAsNamespaceNotFound: a client-go client, asking
// for protobuf as the controllers' clients do, reads a write refused by the
// partition gate as the apiserver's answer for a namespace that does not
// exist, so the controllers drop the key instead of retrying it; the
// apiserver never sees the write.
func TestPartitionMovedReadsAsNamespaceNotFound(t *testing.T) {
	server, served := countingServer(t)
	gates := gatesByPartition{}
	config := &rest.Config{
		Host:          server.URL,
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return fencedRoundTripper{next: rt, partitions: gates}
		},
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}}
	_, err = client.CoreV1().ConfigMaps("team-a").Create(context.Background(), cm, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("got %v, want NotFound", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil || status.Status().Details.Name != "team-a" || status.Status().Details.Kind != "namespaces" {
		t.Fatalf("the answer does not name the namespace: %#v", err)
	}
	if !strings.Contains(err.Error(), ErrPartitionMoved.Error()) {
		t.Fatalf("the answer does not say why: %v", err)
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("the apiserver received %d requests", n)
	}
}

// authorityGone is a replica's authority that has run out (it left).
type authorityGone struct{}

func (authorityGone) Valid() bool                  { return false }
func (authorityGone) Authority() (bool, time.Time) { return false, time.Time{} }

// TestWriteWithoutAuthority: without authority every write is refused, and
// one into a namespace whose partition no longer runs here reads as moved
// (namespace not found), as it does with authority, so that a leaving
// replica's controllers drop the key instead of retrying it; one into a
// partition still running, or cluster-scoped, is refused for authority.
func TestWriteWithoutAuthority(t *testing.T) {
	server, served := countingServer(t)
	running, stopped := newWriteGate(), newWriteGate()
	running.Open()
	stopped.Open()
	stopped.Shut(0)
	gates := gatesByPartition{1: running, 2: stopped}
	do := requester(t, fencedRoundTripper{next: http.DefaultTransport, fence: authorityGone{}, partitions: gates}, server.URL)
	for _, tc := range []struct {
		name, method, path string
		want               error // nil: sent
	}{
		{"write into a stopped partition", http.MethodPost, "/api/v1/namespaces/two-a/configmaps", ErrPartitionMoved},
		{"write into a running partition", http.MethodPost, "/api/v1/namespaces/one-a/configmaps", ErrNoAuthority},
		{"cluster-scoped write", http.MethodPatch, "/api/v1/persistentvolumes/pv", ErrNoAuthority},
		{"read", http.MethodGet, "/api/v1/namespaces/two-a/configmaps", nil},
	} {
		err := do(tc.method, tc.path)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the apiserver received %d requests, want only the read", n)
	}
}

// TestWriteGiveUpStaysInFlight: a write whose caller gives up (its piece
// stopping cancels the controller's context) still holds its gate until
// the apiserver answers it, for a partition's and a singleton's gate
// alike: the apiserver can act on a request whose cancel comes behind it,
// so a gate drained at the cancel let the next owner start before the
// write arrived.
func TestWriteGiveUpStaysInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate func() (fencedRoundTripper, *writeGate)
	}{
		{"partition", func() (fencedRoundTripper, *writeGate) {
			gates := gatesByPartition{1: newWriteGate()}
			return fencedRoundTripper{fence: authorityBack{}, partitions: gates}, gates[1]
		}},
		{"singleton", func() (fencedRoundTripper, *writeGate) {
			run := newWriteGate()
			return fencedRoundTripper{fence: authorityBack{}, run: run}, run
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			var acted atomic.Bool
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(arrived)
				<-release
				acted.Store(true)
				w.WriteHeader(http.StatusOK)
			}))
			defer server.Close()
			released := false
			defer func() {
				if !released {
					close(release) // the handler must return before Close
				}
			}()
			rt, gate := tc.gate()
			rt.next = http.DefaultTransport
			gate.Open()
			ctx, cancel := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, http.MethodPatch, server.URL+"/api/v1/namespaces/one-a/pods/p", nil)
			if err != nil {
				t.Fatal(err)
			}
			gaveUp := make(chan error, 1)
			go func() {
				resp, err := (&http.Client{Transport: rt}).Do(req)
				if resp != nil {
					resp.Body.Close()
				}
				gaveUp <- err
			}()
			<-arrived
			cancel()
			if err := <-gaveUp; !errors.Is(err, context.Canceled) {
				t.Fatalf("the caller that gave up got %v, want context.Canceled", err)
			}
			gate.Shut(0)
			select {
			case <-gate.Drained():
				t.Fatal("drained when the write's caller gave up, while the apiserver had not answered it")
			default:
			}
			close(release)
			released = true
			select {
			case <-gate.Drained():
			case <-time.After(10 * time.Second):
				t.Fatal("not drained after the apiserver answered the write")
			}
			if !acted.Load() {
				t.Error("drained before the apiserver acted on the write")
			}
		})
	}
}

// TestReportTail: a gate shut for a handover still admits the Events
// reporting the writes it admitted until its tail has passed since the
// last of them was answered, and drains only then; every other write is
// refused at once. A gate shut for lost authority (no tail), or idle for
// longer than its tail, admits nothing more and drains as it shuts.
func TestReportTail(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer server.Close()
	// Long enough that a loaded machine sends the Event inside it.
	const tail = 3 * time.Second
	const pods, event = "/api/v1/namespaces/one-a/pods", "/api/v1/namespaces/one-a/events"
	for _, tc := range []struct {
		name string
		// wrote: a write was answered just before the shut.
		wrote bool
		tail  time.Duration
		// reported: the Event after the shut is admitted.
		reported bool
	}{
		{"handover after a write", true, tail, true},
		{"handover of an idle gate", false, tail, false},
		{"lost authority", true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := newWriteGate()
			gate.Open()
			do := requester(t, fencedRoundTripper{next: http.DefaultTransport, partitions: gatesByPartition{1: gate}}, server.URL)
			if tc.wrote {
				if err := do(http.MethodPost, pods); err != nil {
					t.Fatalf("a write through the open gate: %v", err)
				}
			}
			gate.Shut(tc.tail)
			if err := do(http.MethodPost, pods); !errors.Is(err, ErrPartitionMoved) {
				t.Errorf("a pod write after the shut: %v, want refused", err)
			}
			err := do(http.MethodPost, event)
			if reported := err == nil; reported != tc.reported {
				t.Fatalf("an Event after the shut: err %v, want admitted %v", err, tc.reported)
			}
			if !tc.reported {
				select {
				case <-gate.Drained():
				case <-time.After(tail / 3):
					t.Fatal("not drained as it shut, with no report to wait for")
				}
				return
			}
			select {
			case <-gate.Drained():
				t.Fatal("drained inside its report tail")
			default:
			}
			select {
			case <-gate.Drained():
			case <-time.After(3 * tail):
				t.Fatal("not drained once its report tail was over")
			}
			if err := do(http.MethodPost, event); !errors.Is(err, ErrPartitionMoved) {
				t.Errorf("an Event once drained: %v, want refused", err)
			}
		})
	}
}

// TestReportTailOfAMovedPartition: an Event into a partition whose run
// stopped goes to that run's gate, still served in its tail, also when a
// new run of the partition waits to be served, and to the new run's gate
// once it is open.
func TestReportTailOfAMovedPartition(t *testing.T) {
	table := newTestTable(t)
	table.Start([]int{3})
	table.reconcile(t.Context())
	first := table.gateOf("ns-3", true)
	table.Stop([]int{3}, true)
	table.Start([]int{3})
	second := table.gateOf("ns-3", false)
	if first == nil || second == nil || first == second {
		t.Fatalf("gates of the two runs: %p and %p, want two", first, second)
	}
	if got := table.gateOf("ns-3", true); got != first {
		t.Errorf("an Event while the new run waits goes to %p, want the stopped run's %p", got, first)
	}
	<-first.Drained()
	table.reconcile(t.Context())
	if got := table.gateOf("ns-3", true); got != second {
		t.Errorf("an Event once the new run is served goes to %p, want its gate %p", got, second)
	}
}
