package membership

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"k8s.io/klog/v2"
)

// WritersAnnotation, on kube-controller-manager's leader Lease, lists the
// fleet replicas ("identity/incarnation") that have renewed it and may still
// act on that renewal. A replica that stops last releases the Lease only
// when every other writer listed is certainly stopped.
const WritersAnnotation = "fleet-controller-manager.io/writers"

// maxWriters bounds the list: more than this is not one of ours.
const maxWriters = 1024

func encodeWriters(set map[string]bool) string {
	list := make([]string, 0, len(set))
	for w := range set {
		list = append(list, w)
	}
	sort.Strings(list)
	b, _ := json.Marshal(list)
	return string(b)
}

func decodeWriters(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", WritersAnnotation, err)
	}
	if len(list) > maxWriters {
		return nil, fmt.Errorf("annotation %s lists %d writers, more than %d", WritersAnnotation, len(list), maxWriters)
	}
	return list, nil
}

// liveWriters is the writers list to keep: every writer but those this
// replica knows to have stopped, and those it has not seen live for a
// lease duration (an incarnation from before its time, whose Lease is
// gone: while this replica is a participant that has not acknowledged it,
// it runs nothing). An unreadable list is replaced by every member seen.
func (l *leaderLease) liveWriters(annotation string, now time.Time) []string {
	list, err := decodeWriters(annotation)
	if err != nil {
		l.logger.Error(err, "Unreadable list of fleet writers on kube-controller-manager's leader lease; listing every member seen instead", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name))
		for _, p := range l.fleet.Peers() {
			list = append(list, p.Name+"/"+p.State.Incarnation)
		}
	}
	var keep []string
	l.mu.Lock()
	defer l.mu.Unlock()
	listed := map[string]bool{}
	for _, w := range list {
		listed[w] = true
	}
	for w := range l.unknownAt {
		if !listed[w] {
			delete(l.unknownAt, w)
		}
	}
	for _, w := range list {
		if w == l.writer {
			continue
		}
		switch l.fleet.writerStatus(w) {
		case writerLive:
			delete(l.unknownAt, w)
			keep = append(keep, w)
		case writerStopped:
			delete(l.unknownAt, w)
		case writerUnknown:
			first, ok := l.unknownAt[w]
			if !ok {
				l.unknownAt[w], first = now, now
			}
			if now.Sub(first) <= l.memberLeaseDuration {
				keep = append(keep, w)
			}
		}
	}
	return keep
}

// othersActive lists the writers, other than this replica, not known to
// have stopped.
func (l *leaderLease) othersActive(annotation string) ([]string, error) {
	list, err := decodeWriters(annotation)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range list {
		if w != l.writer && l.fleet.writerStatus(w) != writerStopped {
			out = append(out, w)
		}
	}
	return out, nil
}

// writersRead is the writers list on the version of the Lease that a
// successful renewal, sent at sent, was conditionally written over: every
// replica that renewed the Lease before that write and had not been taken
// off the list. ok is false when there is no such renewal (or its list was
// unreadable).
type writersRead struct {
	sent    time.Time
	writers []string
	ok      bool
}

// wroteOver records the writers listed on the version a renewal sent at
// sent replaced. An unreadable list records nothing: a joiner then waits
// its whole lease duration.
func (l *leaderLease) wroteOver(sent time.Time, annotation string) {
	list, err := decodeWriters(annotation)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.read = writersRead{sent: sent, writers: list, ok: true}
}

// lastRead is what wroteOver recorded last, and when the current stretch
// of authority began (zero before the first renewal).
func (l *leaderLease) lastRead() (writersRead, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.read, l.heldSince
}
