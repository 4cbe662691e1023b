//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// fleetAgent is what a fleet client's user agent
// (membership.UserAgent) says: the replica, the piece the client acts for
// (membership.PartitionControllers for the partition controllers, whose
// writes belong to their namespace's partition; a singleton's piece; ""
// for the replica's own clients) and the client's name.
type fleetAgent struct {
	replica, piece, client string
}

// parseFleetAgent reads a fleet client's user agent; false for another
// program's.
func parseFleetAgent(userAgent string) (fleetAgent, bool) {
	rest, ok := strings.CutPrefix(userAgent, "fleet-controller-manager/")
	if !ok {
		return fleetAgent{}, false
	}
	replica, component, ok := strings.Cut(rest, "/")
	if !ok {
		return fleetAgent{}, false
	}
	if client, ok := strings.CutPrefix(component, membership.PartitionControllers+"/"); ok {
		return fleetAgent{replica: replica, piece: membership.PartitionControllers, client: client}, true
	}
	if name, ok := strings.CutPrefix(component, string(shard.SingletonPiece(""))); ok {
		controller, client, _ := strings.Cut(name, "/")
		return fleetAgent{replica: replica, piece: string(shard.SingletonPiece(controller)), client: client}, true
	}
	if piece, ok := legacyClientPieces[component]; ok {
		return fleetAgent{replica: replica, piece: piece, client: component}, true
	}
	if !ownClients[component] {
		return fleetAgent{replica: replica, piece: legacyUnattributed, client: component}, true
	}
	return fleetAgent{replica: replica, client: component}, true
}

// ownClients are the components of a replica's own clients, which act for
// no piece.
var ownClients = map[string]bool{
	"membership": true, "controller-manager": true, "owned-cache": true,
	"shared-informers": true, "metadata-informers": true, "controller-discovery": true,
}

// legacyClientPieces: a release before user agents named the piece
// (v0.1.0, which the upgrade test runs) wrote
// fleet-controller-manager/<identity>/<client>. The partition controllers'
// client names stand for their namespace's partition, and the singletons'
// client names no other piece shares for their piece; any other client
// name of such a release cannot be told apart (node-controller,
// certificate-controller) and is left unjudged (legacyUnattributed).
var legacyClientPieces = map[string]string{
	"deployment-controller": membership.PartitionControllers, "replicaset-controller": membership.PartitionControllers,
	"job-controller": membership.PartitionControllers, "endpointslice-controller": membership.PartitionControllers,
	"endpoint-controller": membership.PartitionControllers, "statefulset-controller": membership.PartitionControllers,
	"daemon-set-controller": membership.PartitionControllers, "cronjob-controller": membership.PartitionControllers,
	"replication-controller": membership.PartitionControllers, "disruption-controller": membership.PartitionControllers,
	"root-ca-cert-publisher": membership.PartitionControllers, "service-account-controller": membership.PartitionControllers,
	"namespace-controller":      "singleton/namespace-controller",
	"generic-garbage-collector": "singleton/garbage-collector-controller",
	"pod-garbage-collector":     "singleton/pod-garbage-collector-controller",
	"ttl-controller":            "singleton/ttl-controller",
}

// legacyUnattributed marks a write of an older release's client whose
// piece its user agent does not tell.
const legacyUnattributed = "?"

// ownWrite says whether a write by one of a replica's own clients (no
// piece) is one it makes for the fleet rather than for a controller: its
// Lease (membership, judged by the handover tests), and the controllers'
// ServiceAccounts and their tokens, which the controller manager's client
// creates and requests before a controller is built, as KCM's does.
func ownWrite(client string, e auditEvent) bool {
	switch client {
	case "membership":
		return e.ObjectRef.Resource == "leases"
	case "controller-manager":
		return e.ObjectRef.Resource == "serviceaccounts" && e.ObjectRef.Namespace == "kube-system" && e.Verb == "create"
	}
	return false
}

// pieceOfWrite is the piece a fleet client's write belongs to: a singleton
// client's piece, or the partition of the namespace a partition
// controller writes into; "" with why when no piece can own it.
func pieceOfWrite(a fleetAgent, e auditEvent, ring shard.RingConfig) (piece, why string) {
	switch {
	case a.piece == membership.PartitionControllers && e.ObjectRef.Namespace == "":
		return "", "a partition controller's write outside any namespace"
	case a.piece == membership.PartitionControllers:
		return string(shard.PartitionPiece(ring.NamespacePartition(e.ObjectRef.Namespace))), ""
	case a.piece != "":
		return a.piece, ""
	}
	return "", "a write by a client of no piece"
}

// judgedWrites counts the fleet's writes the checker judged.
type judgedWrites struct {
	partition, singleton int
	// own: the replicas' own writes (ownWrite), not a controller's.
	own int
	// unattributed: writes of an older release's clients whose piece
	// their user agent does not tell (legacyClientPieces).
	unattributed int
	// inNamespaces: partition controller writes into the namespaces the
	// caller named.
	inNamespaces int
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

// checkOwnership reads every replica's record of when it ran each piece
// (its log, read by parsePieceRuns, as the chaos soak reads it) and the
// apiserver's audit log, and returns every breach: two replicas' runs of
// one piece that overlap (with the writes into the piece made during the
// overlap), and every write by a fleet client outside its replica's runs
// of the write's piece (judgeWrite), or of no piece at all.
func checkOwnership(t *testing.T, auditLog string, logs map[string]string, namespaces []string) []ownershipViolation {
	t.Helper()
	violations, _ := checkRunsAgainstAudit(t, auditLog, logs, nil, nil, namespaces, shard.DefaultRingConfig)
	return violations
}

// ownershipViolations checks runs (piece -> every replica's runs of it)
// against each other and against every write by a client of one of
// replicas, from the audit log: each write belongs to a piece
// (pieceOfWrite) and must fall in its replica's runs of it, including a
// piece no replica ever logged running. Writes by other replicas (another
// fleet's) are left to their own logs.
func ownershipViolations(t *testing.T, auditLog string, runs map[string][]pieceRun, replicas map[string]bool, namespaces []string, ring shard.RingConfig) ([]ownershipViolation, judgedWrites) {
	t.Helper()
	type write struct {
		replica, text      string
		received, at, made time.Time
	}
	inNamespaces := map[string]bool{}
	for _, ns := range namespaces {
		inNamespaces[ns] = true
	}
	var judged judgedWrites
	var out []ownershipViolation
	writesIn := map[string][]write{} // piece -> writes by its controllers
	var unread []string
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || !isWriteVerb(e.Verb) {
			return
		}
		a, ok := parseFleetAgent(e.UserAgent)
		if !ok || !replicas[a.replica] {
			return
		}
		text := auditWriteText(e, a.replica, a.client)
		if a.piece == "" && ownWrite(a.client, e) {
			judged.own++
			return
		}
		if a.piece == legacyUnattributed {
			judged.unattributed++
			return
		}
		if bodyNeverRead(e) {
			unread = append(unread, text)
			return
		}
		piece, why := pieceOfWrite(a, e, ring)
		if piece == "" {
			out = append(out, ownershipViolation{replicas: []string{a.replica}, what: why, writes: []string{text}})
			return
		}
		switch {
		case a.piece == membership.PartitionControllers:
			judged.partition++
			if inNamespaces[e.ObjectRef.Namespace] {
				judged.inNamespaces++
			}
		default:
			judged.singleton++
		}
		writesIn[piece] = append(writesIn[piece], write{a.replica, text, e.RequestReceivedTimestamp, e.StageTimestamp, eventMadeAt(e)})
	})

	if len(unread) > 0 {
		t.Logf("not judged, their bodies never read by the apiserver (so without effect): %s", strings.Join(unread, "; "))
	}
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
	}
	// Every piece written, run or not: a write into a piece no replica
	// ran is outside every run.
	for piece, ws := range writesIn {
		rs := runs[piece]
		for _, w := range ws {
			if why := judgeWrite(rs, w.replica, w.received, w.at, w.made); why != "" {
				out = append(out, ownershipViolation{piece: piece, replicas: []string{w.replica}, what: why, writes: []string{w.text}, around: runsAround(rs, w.received)})
			}
		}
	}
	return out, judged
}

// checkRunsAgainstAudit reads every replica's runs of every piece from its
// log (logs: replica -> log path, its incarnations appended; deaths and
// pauses by process id, as parsePieceRuns takes them) and checks them
// against each other and against every write of the replicas' clients
// (ownershipViolations); it returns the breaches and the writes judged,
// with those of the partition controllers into namespaces counted apart.
func checkRunsAgainstAudit(t *testing.T, auditLog string, logs map[string]string, deaths map[int]time.Time, pauses map[int][][2]time.Time, namespaces []string, ring shard.RingConfig) ([]ownershipViolation, judgedWrites) {
	t.Helper()
	runs := map[string][]pieceRun{}
	replicas := map[string]bool{}
	for replica, path := range logs {
		replicas[replica] = true
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
	return ownershipViolations(t, auditLog, runs, replicas, namespaces, ring)
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
//
// made, when known (an Event's name carries when its recorder made it),
// rules out a run that ended more than madeAfterEnd before it: a write
// received inside the grace of a run that lost its authority, and inside
// the replica's next run of the piece, is the next run's if it was made
// after the first ended (the chaos soak's fault 16 of seed 1796386618:
// fcm-c, cut off, lost the node-lifecycle-controller at 53.079, fcm-a ran
// it 53.438-53.441, fcm-c again from 53.462; the checker laid an Event
// made at 54.267 and received at 54.269 at the first run's door).
func judgeWrite(runs []pieceRun, replica string, received, answered, made time.Time) string {
	var own *pieceRun
	for i, r := range runs {
		until := r.end
		if !r.writesUntil.IsZero() {
			until = r.writesUntil
		}
		if !made.IsZero() && made.After(r.end.Add(madeAfterEnd)) {
			continue
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

// madeAfterEnd is how long after its run ended a write's object can have
// been made: a gate shut for a move admits the Events reporting its last
// writes for its report tail (250 ms, controllers/writegate.go), a gate
// shut for lost authority nothing.
const madeAfterEnd = time.Second

// eventMadeAt is when the recorder made the Event a create writes, read
// from its name (client-go's record and events packages name an Event
// <object>.<UnixNano in hex>), or zero for any other write.
func eventMadeAt(e auditEvent) time.Time {
	if e.Verb != "create" || e.ObjectRef == nil || e.ObjectRef.Resource != "events" {
		return time.Time{}
	}
	i := strings.LastIndexByte(e.ObjectRef.Name, '.')
	if i < 0 {
		return time.Time{}
	}
	ns, err := strconv.ParseInt(e.ObjectRef.Name[i+1:], 16, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
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
	lostThenAgain := append(append([]string{}, lost...), line("06:07:19.900000", "Starting piece", ` view="w" epoch=5`))
	brief := []string{line("06:07:19.800000", "Starting piece", ` view="v" epoch=4`),
		line("06:07:19.840000", "Stopping piece", ` authority=true authorityUntil="`+utc("06:07:29.000000")+`" leaving=false`),
		line("06:07:19.850000", "Piece stopped", ` ran="50ms"`)}
	for _, tc := range []struct {
		name               string
		logs               map[string][]string
		deaths             map[int]time.Time
		pauses             map[int][][2]time.Time
		replica            string
		received, answered string
		ok                 bool
		made               string // "": unknown
	}{
		{"inside its run", map[string][]string{"b": lost}, nil, nil, "b", "06:06:00.000000", "06:06:00.100000", true, ""},
		{"received before its run began", map[string][]string{"b": lost}, nil, nil, "b", "06:04:59.000000", "06:05:00.100000", false, ""},
		{"by a replica that never ran it", map[string][]string{"b": lost}, nil, nil, "a", "06:06:00.000000", "06:06:00.100000", false, ""},
		// The soak's failure: sent before the deadline, received 26 ms
		// after the logged stop.
		{"authority lost: received just after the logged stop", map[string][]string{"b": lost}, nil, nil, "b", "06:07:19.426351", "06:07:19.426400", true, ""},
		{"authority lost: received within the grace of the deadline", map[string][]string{"b": lost}, nil, nil, "b", "06:07:21.300000", "06:07:21.300100", true, ""},
		{"authority lost: received past the grace of the deadline", map[string][]string{"b": lost}, nil, nil, "b", "06:07:21.500000", "06:07:21.500100", false, ""},
		{"authority lost, no deadline logged: within the stop's grace", map[string][]string{"b": noDeadline}, nil, nil, "b", "06:07:21.300000", "06:07:21.300100", true, ""},
		{"authority lost, no deadline logged: past the stop's grace", map[string][]string{"b": noDeadline}, nil, nil, "b", "06:07:21.500000", "06:07:21.500100", false, ""},
		{"moved: received before the piece stopped", map[string][]string{"a": moved}, nil, nil, "a", "06:07:10.005000", "06:07:10.006000", true, ""},
		{"moved: received after the piece stopped", map[string][]string{"a": moved}, nil, nil, "a", "06:07:10.020000", "06:07:10.021000", false, ""},
		{"answered after another replica started the piece", map[string][]string{"b": lost, "c": next}, nil, nil, "b", "06:07:19.426351", "06:07:35.100000", false, ""},
		{"the new owner's write", map[string][]string{"b": lost, "c": next}, nil, nil, "c", "06:07:36.000000", "06:07:36.100000", true, ""},
		{"killed: within the grace", map[string][]string{"b": {started}}, map[int]time.Time{pid: at("06:06:00.000000")}, nil, "b", "06:06:01.500000", "06:06:01.600000", true, ""},
		{"killed: past the grace", map[string][]string{"b": {started}}, map[int]time.Time{pid: at("06:06:00.000000")}, nil, "b", "06:06:02.500000", "06:06:02.600000", false, ""},
		{"paused past the renew deadline: after it", map[string][]string{"b": {started}}, nil, map[int][][2]time.Time{pid: {{at("06:06:00.000000"), at("06:06:15.000000")}}}, "b", "06:06:16.000000", "06:06:16.100000", false, ""},
		{"paused briefly: after it", map[string][]string{"b": {started}}, nil, map[int][][2]time.Time{pid: {{at("06:06:00.000000"), at("06:06:03.000000")}}}, "b", "06:06:04.000000", "06:06:04.100000", true, ""},
		// The chaos soak's fault: b cut off loses the piece, c runs it
		// for 40 ms, b runs it again; b's Event is received within the
		// grace of its first run.
		{"lost, then run again: an Event made in the next run", map[string][]string{"b": lostThenAgain, "c": brief}, nil, nil, "b", "06:07:20.500000", "06:07:20.501000", true, "06:07:20.490000"},
		{"lost, then run again: a write not known to be made later is the first run's", map[string][]string{"b": lostThenAgain, "c": brief}, nil, nil, "b", "06:07:20.500000", "06:07:20.501000", false, ""},
		{"lost, then run again: an Event made before the first run ended", map[string][]string{"b": lostThenAgain, "c": brief}, nil, nil, "b", "06:07:20.500000", "06:07:20.501000", false, "06:07:19.380000"},
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
			var made time.Time
			if tc.made != "" {
				made = at(tc.made)
			}
			why := judgeWrite(runs, tc.replica, at(tc.received), at(tc.answered), made)
			if (why == "") != tc.ok {
				t.Errorf("judgeWrite = %q, want ok=%v; runs: %v", why, tc.ok, runs)
			}
		})
	}
}

// TestEveryFleetWriteJudged: the checker judges every write of the named
// replicas' clients against the runs of its piece (the namespace's
// partition for the partition controllers, the singleton's piece for a
// singleton's clients), including a piece no replica ever ran and a write
// that belongs to no piece; the replicas' own writes (Lease, the
// controllers' ServiceAccounts) and other fleets' are not a controller's.
func TestEveryFleetWriteJudged(t *testing.T) {
	base := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	ns := "judged"
	partition := string(shard.PartitionPiece(shard.DefaultRingConfig.NamespacePartition(ns)))
	runs := map[string][]pieceRun{
		partition:                             {{replica: "fcm-a", start: base, end: base.Add(time.Minute), ended: "test"}},
		"singleton/namespace-controller":      {{replica: "fcm-b", start: base, end: base.Add(time.Minute), ended: "test"}},
		"singleton/node-lifecycle-controller": {{replica: "fcm-a", start: base, end: base.Add(time.Minute), ended: "test"}},
	}
	type write struct {
		agent, verb, resource, namespace string
	}
	for _, tc := range []struct {
		name          string
		write         write
		wantViolation string // "" for none
	}{
		{"a partition controller within its run", write{"fcm-a/partition/replicaset-controller", "create", "pods", ns}, ""},
		{"a partition controller of the wrong replica", write{"fcm-b/partition/replicaset-controller", "create", "pods", ns}, "outside its replica's runs"},
		{"a partition controller outside any namespace", write{"fcm-a/partition/replicaset-controller", "update", "nodes", ""}, "outside any namespace"},
		{"a partition no replica ran", write{"fcm-a/partition/root-ca-cert-publisher", "create", "configmaps", "never-run"}, "outside its replica's runs"},
		{"a singleton within its run", write{"fcm-b/singleton/namespace-controller/namespace-controller", "delete", "pods", ns}, ""},
		{"a singleton client name shared with another piece", write{"fcm-b/singleton/node-ipam-controller/node-controller", "update", "nodes", ""}, "outside its replica's runs"},
		{"the same client name, its own piece", write{"fcm-a/singleton/node-lifecycle-controller/node-controller", "update", "nodes", ""}, ""},
		{"a singleton no replica ran", write{"fcm-a/singleton/ttl-controller/ttl-controller", "patch", "nodes", ""}, "outside its replica's runs"},
		{"a Lease renewal", write{"fcm-a/membership", "update", "leases", "kube-system"}, ""},
		{"a controller's ServiceAccount", write{"fcm-c/controller-manager", "create", "serviceaccounts", "kube-system"}, ""},
		{"the controller manager's client writing anything else", write{"fcm-a/controller-manager", "delete", "pods", ns}, "no piece"},
		{"another fleet's replica", write{"rogue/partition/replicaset-controller", "create", "pods", ns}, ""},
		{"an older release's partition controller", write{"fcm-b/replicaset-controller", "create", "pods", ns}, "outside its replica's runs"},
		{"an older release's singleton", write{"fcm-b/namespace-controller", "delete", "pods", ns}, ""},
		{"an older release's shared client name", write{"fcm-b/node-controller", "update", "nodes", ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			at := base.Add(30 * time.Second).Format(time.RFC3339Nano)
			line := fmt.Sprintf(`{"stage":"ResponseComplete","verb":%q,"userAgent":"fleet-controller-manager/%s","objectRef":{"resource":%q,"namespace":%q,"name":"x"},"responseStatus":{"code":200},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`+"\n",
				tc.write.verb, tc.write.agent, tc.write.resource, tc.write.namespace, at, at)
			if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
				t.Fatal(err)
			}
			found, _ := ownershipViolations(t, path, runs, map[string]bool{"fcm-a": true, "fcm-b": true, "fcm-c": true}, []string{ns}, shard.DefaultRingConfig)
			switch {
			case tc.wantViolation == "" && len(found) > 0:
				t.Errorf("violations %v, want none", found)
			case tc.wantViolation != "" && (len(found) != 1 || !strings.Contains(found[0].what, tc.wantViolation)):
				t.Errorf("violations %v, want one saying %q", found, tc.wantViolation)
			}
		})
	}
}
