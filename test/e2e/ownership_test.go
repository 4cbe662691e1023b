//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// partitionControllerClients are the client names of the partition
// controllers the e2e workloads exercise (Deployments, Jobs, Services):
// their namespaced writes belong to the namespace's partition piece.
// Singletons also write into namespaces (the namespace controller, the
// garbage collector) and are not checked here.
var partitionControllerClients = map[string]bool{
	"deployment-controller": true, "replicaset-controller": true, "job-controller": true,
	"endpointslice-controller": true, "endpoint-controller": true,
}

// ownershipViolation is a breach of "never two owners" the checker found.
type ownershipViolation struct {
	piece    string
	replicas []string // the replicas involved
	what     string
	writes   []string // the offending writes, as found in the audit log
}

func (v ownershipViolation) String() string {
	return fmt.Sprintf("%s (%s): %s; writes: %s", v.piece, strings.Join(v.replicas, ", "), v.what, strings.Join(v.writes, "; "))
}

// pieceRun is one replica's run of a piece: the time it may act in.
type pieceRun struct {
	replica    string
	start, end time.Time
}

// checkOwnership reads every replica's record of when it ran the
// partition pieces of namespaces (its log: "Starting piece", "Piece
// stopped") and the apiserver's audit log, and returns every breach: two
// replicas' runs of one piece that overlap (with the writes into the
// piece's namespaces made during the overlap), and every write by a
// partition controller into those namespaces outside its replica's runs
// of the namespace's piece.
func checkOwnership(t *testing.T, auditLog string, logs map[string]string, namespaces []string) []ownershipViolation {
	t.Helper()
	pieceOf := namespacePieces(namespaces)
	runs := map[string][]pieceRun{} // piece -> runs of every replica
	for _, piece := range pieceOf {
		if _, done := runs[piece]; done {
			continue
		}
		runs[piece] = []pieceRun{}
		for replica, path := range logs {
			for _, iv := range ownership(t, path, piece) {
				runs[piece] = append(runs[piece], pieceRun{replica, iv[0], iv[1]})
			}
		}
	}
	return ownershipViolations(t, auditLog, runs, pieceOf)
}

// namespacePieces maps each namespace to its partition piece.
func namespacePieces(namespaces []string) map[string]string {
	pieceOf := map[string]string{}
	for _, ns := range namespaces {
		pieceOf[ns] = string(shard.PartitionPiece(shard.DefaultRingConfig.NamespacePartition(ns)))
	}
	return pieceOf
}

// ownershipViolations checks runs (piece -> every replica's runs of it)
// against each other and against the partition controllers' writes, from
// the audit log, into the namespaces of pieceOf.
func ownershipViolations(t *testing.T, auditLog string, runs map[string][]pieceRun, pieceOf map[string]string) []ownershipViolation {
	t.Helper()
	type write struct {
		replica, client, text string
		received, at          time.Time
	}
	writesIn := map[string][]write{} // piece -> writes by partition controllers
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || !isWriteVerb(e.Verb) {
			return
		}
		piece, ok := pieceOf[e.ObjectRef.Namespace]
		if !ok {
			return
		}
		rest, ok := strings.CutPrefix(e.UserAgent, "fleet-controller-manager/")
		if !ok {
			return
		}
		replica, client, _ := strings.Cut(rest, "/")
		if !partitionControllerClients[client] {
			return
		}
		writesIn[piece] = append(writesIn[piece], write{replica, client,
			fmt.Sprintf("%s %s/%s/%s by %s (%s) at %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, replica, client, e.StageTimestamp.Local().Format("15:04:05.000000")),
			e.RequestReceivedTimestamp, e.StageTimestamp})
	})

	var out []ownershipViolation
	for piece, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				a, b := rs[i], rs[j]
				if a.replica == b.replica || !b.start.Before(a.end) {
					continue
				}
				from, to := b.start, a.end
				if b.end.Before(to) {
					to = b.end
				}
				v := ownershipViolation{piece: piece, replicas: []string{a.replica, b.replica},
					what: fmt.Sprintf("both ran it from %s to %s", from.Format("15:04:05.000"), to.Format("15:04:05.000"))}
				for _, w := range writesIn[piece] {
					if !w.at.Before(from) && !w.at.After(to) {
						v.writes = append(v.writes, w.text)
					}
				}
				out = append(out, v)
			}
		}
		for _, w := range writesIn[piece] {
			if why := judgeWrite(rs, w.replica, w.received, w.at); why != "" {
				out = append(out, ownershipViolation{piece: piece, replicas: []string{w.replica}, what: why, writes: []string{w.text}})
			}
		}
	}
	return out
}

// writesChecked counts the partition controllers' writes into namespaces
// in the audit log, so a check that found nothing can show it looked.
func writesChecked(t *testing.T, auditLog string, namespaces []string) int {
	t.Helper()
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	n := 0
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef != nil && want[e.ObjectRef.Namespace] && isWriteVerb(e.Verb) && strings.HasPrefix(e.UserAgent, "fleet-controller-manager/") {
			_, rest, _ := strings.Cut(strings.TrimPrefix(e.UserAgent, "fleet-controller-manager/"), "/")
			if partitionControllerClients[rest] {
				n++
			}
		}
	})
	return n
}

// singletonClients maps the client names of singleton controllers the e2e
// workloads make write (namespaces deleted, orphans collected, pods of
// gone nodes) to their pieces: every write they make, in any namespace or
// none, belongs to the piece.
var singletonClients = map[string]string{
	"namespace-controller":      "singleton/namespace-controller",
	"generic-garbage-collector": "singleton/garbage-collector-controller",
	"pod-garbage-collector":     "singleton/pod-garbage-collector-controller",
	"node-controller":           "singleton/node-lifecycle-controller",
}

// singletonViolations returns every write by a singleton controller of
// singletonClients outside its replica's runs of the controller's piece,
// and how many such writes it checked.
func singletonViolations(t *testing.T, auditLog string, runs map[string][]pieceRun) ([]ownershipViolation, int) {
	t.Helper()
	var out []ownershipViolation
	checked := 0
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || !isWriteVerb(e.Verb) {
			return
		}
		rest, ok := strings.CutPrefix(e.UserAgent, "fleet-controller-manager/")
		if !ok {
			return
		}
		replica, client, _ := strings.Cut(rest, "/")
		piece, ok := singletonClients[client]
		if !ok {
			return
		}
		checked++
		if why := judgeWrite(runs[piece], replica, e.RequestReceivedTimestamp, e.StageTimestamp); why != "" {
			out = append(out, ownershipViolation{piece: piece, replicas: []string{replica}, what: why,
				writes: []string{fmt.Sprintf("%s %s/%s/%s by %s (%s) at %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, replica, client, e.StageTimestamp.Local().Format("15:04:05.000000"))}})
		}
	})
	return out, checked
}

// judgeWrite says what is wrong with a write by replica that the apiserver
// received at received and answered at answered, given every replica's runs
// of its piece ("" when nothing is): the replica must have been running
// the piece when the write arrived (it was sent with authority), and no
// other replica may have run the piece before the write was answered (its
// effect, which lands in between, cannot meet another owner's work). A
// write sent just before the run ended, answered just after, is fine: the
// replica's authority ends a renew deadline after its last renewal and no
// one can take the piece before a lease duration.
func judgeWrite(runs []pieceRun, replica string, received, answered time.Time) string {
	var own *pieceRun
	for i, r := range runs {
		if r.replica == replica && !received.Before(r.start) && !received.After(r.end) {
			own = &runs[i]
			break
		}
	}
	if own == nil {
		return "a write the apiserver received outside its replica's runs of the piece"
	}
	for _, r := range runs {
		if r.replica != replica && r.start.After(own.start) && !r.start.After(answered) {
			return fmt.Sprintf("a write answered at %s, after %s started the piece at %s", answered.Local().Format("15:04:05.000000"), r.replica, r.start.Local().Format("15:04:05.000000"))
		}
	}
	return ""
}

func TestJudgeWrite(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	runs := []pieceRun{{"a", at(0), at(10)}, {"b", at(25), at(40)}}
	for _, tc := range []struct {
		name               string
		replica            string
		received, answered float64
		ok                 bool
	}{
		{"inside its run", "a", 1, 2, true},
		{"sent before the stop, answered after it", "a", 9.9, 10.5, true},
		{"received after its run ended", "a", 11, 11.1, false},
		{"received before its run began", "b", 24, 26, false},
		{"answered after another replica started the piece", "a", 9, 26, false},
		{"by a replica that never ran it", "c", 5, 5.1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := judgeWrite(runs, tc.replica, at(tc.received), at(tc.answered))
			if (why == "") != tc.ok {
				t.Errorf("judgeWrite = %q, want ok=%v", why, tc.ok)
			}
		})
	}
}
