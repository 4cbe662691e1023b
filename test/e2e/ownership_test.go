//go:build e2e

package e2e

import (
	"fmt"
	"os"
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
	// around: every replica's runs of the piece near the violation.
	around []string
}

func (v ownershipViolation) String() string {
	out := fmt.Sprintf("%s (%s): %s; writes: %s", v.piece, strings.Join(v.replicas, ", "), v.what, strings.Join(v.writes, "; "))
	if len(v.around) > 0 {
		out += "\n\truns of the piece around it: " + strings.Join(v.around, "\n\t\t")
	}
	return out
}

// auditWriteText describes a write from the audit log: what, by whom, when
// the apiserver received and answered it, and its answer.
func auditWriteText(e auditEvent, replica, client string) string {
	code := 0
	if e.ResponseStatus != nil {
		code = e.ResponseStatus.Code
	}
	return fmt.Sprintf("%s %s/%s/%s by %s (%s) received %s answered %s (%d)", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, replica, client,
		e.RequestReceivedTimestamp.Local().Format("15:04:05.000000"), e.StageTimestamp.Local().Format("15:04:05.000000"), code)
}

// pieceRun is one replica's run of a piece.
type pieceRun struct {
	replica string
	// start and end: when the replica ran the piece (no other replica
	// may run it then).
	start, end time.Time
	// writesUntil, when set, is how late the apiserver may receive the
	// run's writes, if not end (a run stopped for lost authority:
	// parsePieceRuns).
	writesUntil time.Time
	// ended says why end is where it is (failure output).
	ended string
	// authorityEnded: when the replica could send nothing more, for a
	// run stopped because its authority ran out (zero otherwise); end
	// is later by the transit grace.
	authorityEnded time.Time
}

func (r pieceRun) String() string {
	end := "still running"
	if r.end.Year() < 2200 {
		end = r.end.Local().Format("15:04:05.000000")
	}
	out := fmt.Sprintf("%s %s-%s (%s", r.replica, r.start.Local().Format("15:04:05.000000"), end, r.ended)
	if !r.writesUntil.IsZero() {
		out += "; its writes may arrive until " + r.writesUntil.Local().Format("15:04:05.000000")
	}
	return out + ")"
}

// runsAround lists every replica's runs of a piece that come within 30 s
// of at (failure output: what each replica ran around a violation).
func runsAround(runs []pieceRun, at time.Time) []string {
	var out []string
	for _, r := range runs {
		if r.start.Before(at.Add(30*time.Second)) && r.end.After(at.Add(-30*time.Second)) {
			out = append(out, r.String())
		}
	}
	return out
}

// checkOwnership reads every replica's record of when it ran the
// partition pieces of namespaces (its log, read by parsePieceRuns, as the
// chaos soak reads it) and the apiserver's audit log, and returns every
// breach: two replicas' runs of one piece that overlap (with the writes
// into the piece's namespaces made during the overlap), and every write by
// a partition controller into those namespaces outside its replica's runs
// of the namespace's piece (judgeWrite).
func checkOwnership(t *testing.T, auditLog string, logs map[string]string, namespaces []string) []ownershipViolation {
	t.Helper()
	violations, _ := checkRunsAgainstAudit(t, auditLog, logs, nil, nil, namespaces)
	return violations
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
	var unread []string
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
		if bodyNeverRead(e) {
			unread = append(unread, auditWriteText(e, replica, client))
			return
		}
		writesIn[piece] = append(writesIn[piece], write{replica, client, auditWriteText(e, replica, client), e.RequestReceivedTimestamp, e.StageTimestamp})
	})

	if len(unread) > 0 {
		t.Logf("not judged, their bodies never read by the apiserver (so without effect): %s", strings.Join(unread, "; "))
	}
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
					what: fmt.Sprintf("both ran it from %s to %s", from.Format("15:04:05.000"), to.Format("15:04:05.000")), around: runsAround(rs, from)}
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
				out = append(out, ownershipViolation{piece: piece, replicas: []string{w.replica}, what: why, writes: []string{w.text}, around: runsAround(rs, w.received)})
			}
		}
	}
	return out
}

// lateWrites lists, for every write by a partition controller that the
// apiserver received after its replica's authority over the piece had
// ended (within the transit grace judgeWrite allows), how long after.
func lateWrites(t *testing.T, auditLog string, runs map[string][]pieceRun, pieceOf map[string]string) []time.Duration {
	t.Helper()
	var out []time.Duration
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || !isWriteVerb(e.Verb) {
			return
		}
		piece, ok := pieceOf[e.ObjectRef.Namespace]
		rest, agent := strings.CutPrefix(e.UserAgent, "fleet-controller-manager/")
		if !ok || !agent {
			return
		}
		replica, client, _ := strings.Cut(rest, "/")
		if !partitionControllerClients[client] {
			return
		}
		for _, r := range runs[piece] {
			if r.replica == replica && !r.authorityEnded.IsZero() && e.RequestReceivedTimestamp.After(r.authorityEnded) && !e.RequestReceivedTimestamp.After(r.writesUntil) {
				out = append(out, e.RequestReceivedTimestamp.Sub(r.authorityEnded))
			}
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// checkRunsAgainstAudit reads every replica's runs of every piece from its
// log (logs: replica -> log path, its incarnations appended; deaths and
// pauses by process id, as parsePieceRuns takes them) and checks them
// against each other and against the partition controllers' writes into
// namespaces; it returns the breaches and how many writes it checked.
func checkRunsAgainstAudit(t *testing.T, auditLog string, logs map[string]string, deaths map[int]time.Time, pauses map[int][][2]time.Time, namespaces []string) ([]ownershipViolation, int) {
	t.Helper()
	runs := map[string][]pieceRun{}
	for replica, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := parsePieceRuns(replica, strings.Split(string(data), "\n"), time.Now().Year(), deaths, pauses)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for piece, rs := range parsed {
			runs[piece] = append(runs[piece], rs...)
		}
	}
	return ownershipViolations(t, auditLog, runs, namespacePieces(namespaces)), writesChecked(t, auditLog, namespaces)
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
		if bodyNeverRead(e) {
			t.Logf("not judged, its body never read by the apiserver (so without effect): %s", auditWriteText(e, replica, client))
			return
		}
		if why := judgeWrite(runs[piece], replica, e.RequestReceivedTimestamp, e.StageTimestamp); why != "" {
			out = append(out, ownershipViolation{piece: piece, replicas: []string{replica}, what: why,
				writes: []string{auditWriteText(e, replica, client)}, around: runsAround(runs[piece], e.RequestReceivedTimestamp)})
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
		until := r.end
		if !r.writesUntil.IsZero() {
			until = r.writesUntil
		}
		if r.replica == replica && !received.Before(r.start) && !received.After(until) {
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

// TestJudgeWrite: runs read from replicas' log lines (parsePieceRuns),
// and writes judged against them (judgeWrite).
func TestJudgeWrite(t *testing.T) {
	const pid = 4242
	line := func(clock, msg, rest string) string {
		return fmt.Sprintf(`I1126 %s %7d manager.go:1] "%s" piece="partition/31"%s`, clock, pid, msg, rest)
	}
	at := func(clock string) time.Time {
		ts, err := time.ParseInLocation("2006 0102 15:04:05.000000", "2026 1126 "+clock, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	utc := func(clock string) string { return at(clock).UTC().Format(time.RFC3339Nano) }
	started := line("06:05:00.000000", "Starting piece", ` view="x" epoch=3`)
	// b's log: a stop for lost authority (logged at 19.400, deadline
	// 19.390), as in the chaos soak's etcd restart; a's: a run that ends
	// by a move (stopped at 10.000), and c's, which starts the piece at
	// 06:07:35.
	lost := []string{started,
		line("06:07:19.400000", "Stopping piece", ` authority=false authorityUntil="`+utc("06:07:19.390000")+`" leaving=false`),
		line("06:07:19.420000", "Piece stopped", ` ran="2m19s"`)}
	moved := []string{started,
		line("06:07:10.000000", "Stopping piece", ` authority=true authorityUntil="`+utc("06:07:20.000000")+`" leaving=false`),
		line("06:07:10.010000", "Piece stopped", ` ran="2m10s"`)}
	noDeadline := []string{started,
		line("06:07:19.400000", "Stopping piece", ` authority=false leaving=false`),
		line("06:07:25.000000", "Piece stopped", ` ran="2m25s"`)}
	next := []string{line("06:07:35.000000", "Starting piece", ` view="y" epoch=4`)}
	for _, tc := range []struct {
		name               string
		logs               map[string][]string
		deaths             map[int]time.Time
		pauses             map[int][][2]time.Time
		replica            string
		received, answered string
		ok                 bool
	}{
		{"inside its run", map[string][]string{"b": lost}, nil, nil, "b", "06:06:00.000000", "06:06:00.100000", true},
		{"received before its run began", map[string][]string{"b": lost}, nil, nil, "b", "06:04:59.000000", "06:05:00.100000", false},
		{"by a replica that never ran it", map[string][]string{"b": lost}, nil, nil, "a", "06:06:00.000000", "06:06:00.100000", false},
		// The soak's failure: sent before the deadline, received 26 ms
		// after the logged stop.
		{"authority lost: received just after the logged stop", map[string][]string{"b": lost}, nil, nil, "b", "06:07:19.426351", "06:07:19.426400", true},
		{"authority lost: received within the grace of the deadline", map[string][]string{"b": lost}, nil, nil, "b", "06:07:21.300000", "06:07:21.300100", true},
		{"authority lost: received past the grace of the deadline", map[string][]string{"b": lost}, nil, nil, "b", "06:07:21.500000", "06:07:21.500100", false},
		{"authority lost, no deadline logged: within the stop's grace", map[string][]string{"b": noDeadline}, nil, nil, "b", "06:07:21.300000", "06:07:21.300100", true},
		{"authority lost, no deadline logged: past the stop's grace", map[string][]string{"b": noDeadline}, nil, nil, "b", "06:07:21.500000", "06:07:21.500100", false},
		{"moved: received before the piece stopped", map[string][]string{"a": moved}, nil, nil, "a", "06:07:10.005000", "06:07:10.006000", true},
		{"moved: received after the piece stopped", map[string][]string{"a": moved}, nil, nil, "a", "06:07:10.020000", "06:07:10.021000", false},
		{"answered after another replica started the piece", map[string][]string{"b": lost, "c": next}, nil, nil, "b", "06:07:19.426351", "06:07:35.100000", false},
		{"the new owner's write", map[string][]string{"b": lost, "c": next}, nil, nil, "c", "06:07:36.000000", "06:07:36.100000", true},
		{"killed: within the grace", map[string][]string{"b": {started}}, map[int]time.Time{pid: at("06:06:00.000000")}, nil, "b", "06:06:01.500000", "06:06:01.600000", true},
		{"killed: past the grace", map[string][]string{"b": {started}}, map[int]time.Time{pid: at("06:06:00.000000")}, nil, "b", "06:06:02.500000", "06:06:02.600000", false},
		{"paused past the renew deadline: after it", map[string][]string{"b": {started}}, nil, map[int][][2]time.Time{pid: {{at("06:06:00.000000"), at("06:06:15.000000")}}}, "b", "06:06:16.000000", "06:06:16.100000", false},
		{"paused briefly: after it", map[string][]string{"b": {started}}, nil, map[int][][2]time.Time{pid: {{at("06:06:00.000000"), at("06:06:03.000000")}}}, "b", "06:06:04.000000", "06:06:04.100000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []pieceRun
			for replica, lines := range tc.logs {
				parsed, err := parsePieceRuns(replica, lines, 2026, tc.deaths, tc.pauses)
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, parsed["partition/31"]...)
			}
			sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
			why := judgeWrite(runs, tc.replica, at(tc.received), at(tc.answered))
			if (why == "") != tc.ok {
				t.Errorf("judgeWrite = %q, want ok=%v; runs: %v", why, tc.ok, runs)
			}
		})
	}
}
