package membership

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRunEndsWithItsContext: every goroutine a Member starts (the Lease
// watch, the renew, expiry and gauge loops, the authority wake timer, and
// kube-controller-manager's leader Lease) has ended once Run returns after
// its context ended.
func TestRunEndsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m, err := New(Config{
		Client: fake.NewClientset(), Namespace: "ns", Fleet: "f", Identity: "a",
		LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		LeaderLease: &LeaderLeaseConfig{Namespace: "kube-system", Name: "kube-controller-manager",
			LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, _ := m.Authority(); ok && !m.Joining() {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no authority after 10 s: %s", m.WhyNoAuthority())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
