package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// leave stops renewing, then releases the Lease if no other writer may
// still act, or else takes this replica off the writers list so that the
// last one to leave can release it. The caller has stopped every piece.
//
// When the whole fleet stops at once, every replica first sees the others
// still live; each waits up to leaveWait for them to publish that they
// left, so that one of them releases the Lease instead of none. A replica
// leaving a fleet that stays (a rolling update) waits that long once, after
// its pieces have already moved.
func (l *leaderLease) leave(ctx context.Context) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	l.left, l.deadline = true, time.Time{}
	l.mu.Unlock()
	clk := l.clock
	waitUntil := clk.Now().Add(l.leaveWait())
	store := l.store
	for attempt := 0; attempt < 50; attempt++ {
		lease, err := store.Get(ctx, l.cfg.Namespace, l.cfg.Name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading kube-controller-manager's leader lease: %w", err)
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		if !l.ours(holder) {
			return nil
		}
		others, err := l.othersActive(lease.Annotations[WritersAnnotation])
		release := err == nil && len(others) == 0
		if !release && err == nil && clk.Now().Before(waitUntil) {
			select {
			case <-ctx.Done():
			case <-clk.After(l.cfg.RetryPeriod / 8):
			}
			if ctx.Err() == nil {
				continue
			}
		}
		if !release {
			if err != nil {
				l.logger.Error(err, "Not releasing kube-controller-manager's leader lease")
			} else {
				l.logger.Info("Not releasing kube-controller-manager's leader lease: other replicas may still act on it", "others", others)
			}
		}
		updated := l.leftBy(lease, release)
		// Conditional on the resourceVersion read, like every write here.
		_, err = store.Update(ctx, updated)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("leaving kube-controller-manager's leader lease: %w", err)
		}
		if release {
			l.logger.Info("Released kube-controller-manager's leader lease: the fleet runs nothing", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name))
		}
		return nil
	}
	return errors.New("kube-controller-manager's leader lease kept changing while leaving")
}

// leftBy is lease as this replica leaves it: released as client-go
// releases (no holder, a one-second duration), or with this replica taken
// off the writers list.
func (l *leaderLease) leftBy(lease *coordinationv1.Lease, release bool) *coordinationv1.Lease {
	updated := lease.DeepCopy()
	if release {
		rec, _, _ := record(lease)
		now := metav1.NewTime(l.clock.Now())
		updated.Spec = rl.LeaderElectionRecordToLeaseSpec(&rl.LeaderElectionRecord{
			LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now, LeaderTransitions: rec.LeaderTransitions,
		})
		delete(updated.Annotations, WritersAnnotation)
		return updated
	}
	list, _ := decodeWriters(updated.Annotations[WritersAnnotation])
	set := map[string]bool{}
	for _, w := range list {
		if w != l.writer {
			set[w] = true
		}
	}
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[WritersAnnotation] = encodeWriters(set)
	return updated
}

// leaveWait bounds how long a leaving replica waits for the others to stop
// before it leaves the release to them. Replicas told to stop together
// reach their leave at different times (each stops its own pieces first);
// only those arriving within a watch delay of each other need to wait, so
// a short wait is enough, and it is all a rolling update pays per replica
// (a whole retry period would be paid once per replica).
func (l *leaderLease) leaveWait() time.Duration { return l.cfg.RetryPeriod / 4 }
