//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// faultWindow is one injected fault, from its injection until the
// workload had converged after its heal: what happens in it is the
// fault's doing.
type faultWindow struct {
	kind     chaosFault
	what     string
	from, to time.Time
}

// faultAt names the fault whose window holds at ("" if none).
func faultAt(windows []faultWindow, at time.Time) *faultWindow {
	for i := range windows {
		if !at.Before(windows[i].from) && !at.After(windows[i].to) {
			return &windows[i]
		}
	}
	return nil
}

// pastAuthority is a write the apiserver received after its writer's
// authority over the write's piece had ended.
type pastAuthority struct {
	piece, replica string
	received       time.Time
	late           time.Duration
}

// writesPastAuthority finds, for every write of a fleet client, its
// writer's last run of the write's piece that began before the write, and
// returns the writes received after that run's authority had ended,
// however late (judgeWrite allows chaosGrace; what is later is also a
// violation). A write of the writer's next run of the piece is not late,
// however soon after the last run's end that run began.
func writesPastAuthority(t *testing.T, auditLog string, runs map[string][]pieceRun) []pastAuthority {
	t.Helper()
	var out []pastAuthority
	readAudit(t, auditLog, func(e auditEvent) {
		if e.ObjectRef == nil || !isWriteVerb(e.Verb) || bodyNeverRead(e) {
			return
		}
		a, ok := parseFleetAgent(e.UserAgent)
		if !ok || a.piece == legacyUnattributed || a.piece == "" {
			return
		}
		piece, _ := pieceOfWrite(a, e, shard.DefaultRingConfig)
		var last *pieceRun
		for i, r := range runs[piece] {
			if r.replica == a.replica && !r.start.After(e.RequestReceivedTimestamp) && (last == nil || r.start.After(last.start)) {
				last = &runs[piece][i]
			}
		}
		if last == nil || last.authorityEnded.IsZero() || !e.RequestReceivedTimestamp.After(last.authorityEnded) {
			return
		}
		out = append(out, pastAuthority{piece: piece, replica: a.replica, received: e.RequestReceivedTimestamp, late: e.RequestReceivedTimestamp.Sub(last.authorityEnded)})
	})
	return out
}

// unservedGap is a time in which no replica served a partition.
type unservedGap struct {
	piece    string
	from, to time.Time
}

// unservedGaps lists, for every partition, the times between from and to
// in which no replica's run served it: a run serves from its start until
// its authority ended or, without a loss, its end.
func unservedGaps(runs map[string][]pieceRun, from, to time.Time) []unservedGap {
	var out []unservedGap
	for piece, rs := range runs {
		if !strings.HasPrefix(piece, "partition/") {
			continue
		}
		type span struct{ start, end time.Time }
		var spans []span
		for _, r := range rs {
			end := r.end
			if !r.authorityEnded.IsZero() && r.authorityEnded.Before(end) {
				end = r.authorityEnded
			}
			spans = append(spans, span{r.start, end})
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
		served := from
		for _, s := range spans {
			if s.start.After(served) && s.start.After(from) && served.Before(to) {
				end := s.start
				if end.After(to) {
					end = to
				}
				out = append(out, unservedGap{piece: piece, from: served, to: end})
			}
			if s.end.After(served) {
				served = s.end
			}
		}
		if served.Before(to) {
			out = append(out, unservedGap{piece: piece, from: served, to: to})
		}
	}
	return out
}

// kindFigures is, per fault kind, the longest write past its writer's
// authority and the longest time a partition went unserved.
type kindFigures struct {
	pastAuthority  int
	latestPast     time.Duration
	unserved       time.Duration
	unservedPiece  string
	unservedFaults string
}

// figuresByKind attributes every write past authority and every unserved
// gap to the fault whose window it began in.
func figuresByKind(windows []faultWindow, past []pastAuthority, gaps []unservedGap) map[chaosFault]*kindFigures {
	out := map[chaosFault]*kindFigures{}
	get := func(k chaosFault) *kindFigures {
		if out[k] == nil {
			out[k] = &kindFigures{}
		}
		return out[k]
	}
	for _, p := range past {
		w := faultAt(windows, p.received)
		if w == nil {
			continue
		}
		f := get(w.kind)
		f.pastAuthority++
		if p.late > f.latestPast {
			f.latestPast = p.late
		}
	}
	for _, g := range gaps {
		w := faultAt(windows, g.from)
		if w == nil {
			continue
		}
		f := get(w.kind)
		if d := g.to.Sub(g.from); d > f.unserved {
			f.unserved, f.unservedPiece, f.unservedFaults = d, g.piece, w.what
		}
	}
	return out
}

// String is the figures' line in the soak's summary.
func (f *kindFigures) String() string {
	if f == nil {
		return "no write past authority; no partition unserved"
	}
	past := "no write past authority"
	if f.pastAuthority > 0 {
		past = fmt.Sprintf("%d writes past authority, latest %v after it", f.pastAuthority, f.latestPast.Round(time.Millisecond))
	}
	unserved := "no partition unserved"
	if f.unserved > 0 {
		unserved = fmt.Sprintf("longest unserved %v (%s, in: %s)", f.unserved.Round(time.Millisecond), f.unservedPiece, f.unservedFaults)
	}
	return past + "; " + unserved
}

// TestFiguresByKind: unserved gaps found between runs (a lost authority
// ends service at its deadline, not at its logged stop) and, with the
// writes past authority, charged to the fault whose window they began in.
func TestFiguresByKind(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	forever := time.Unix(0, 1<<62)
	runs := map[string][]pieceRun{
		// Served throughout by a handover with no gap.
		"partition/1": {{replica: "a", start: at(0), end: at(10)}, {replica: "b", start: at(10), end: forever}},
		// a's authority ended at 20 (stop logged at 21); b took it at 27.
		"partition/2": {{replica: "a", start: at(0), end: at(21), authorityEnded: at(20), writesUntil: at(22)},
			{replica: "b", start: at(27), end: forever}},
		// Unserved from 50 on to the end.
		"partition/3": {{replica: "c", start: at(0), end: at(50)}},
		// Singletons are not partitions.
		"singleton/x": {{replica: "a", start: at(0), end: at(1)}},
	}
	windows := []faultWindow{
		{kind: faultSlow, what: "fault 1", from: at(15), to: at(30)},
		{kind: faultThrottled, what: "fault 2", from: at(45), to: at(60)},
	}
	gaps := unservedGaps(runs, at(0), at(70))
	var got []string
	for _, g := range gaps {
		got = append(got, fmt.Sprintf("%s %v-%v", g.piece, g.from.Sub(base), g.to.Sub(base)))
	}
	sort.Strings(got)
	want := []string{"partition/2 20s-27s", "partition/3 50s-1m10s"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("unserved gaps %q, want %q", got, want)
	}
	past := []pastAuthority{
		{piece: "partition/2", replica: "a", received: at(20.5), late: 500 * time.Millisecond},
		{piece: "partition/2", replica: "a", received: at(21.5), late: 1500 * time.Millisecond},
		// Outside every window: not charged.
		{piece: "partition/9", replica: "a", received: at(40), late: 3 * time.Second},
	}
	figures := figuresByKind(windows, past, gaps)
	for _, tc := range []struct {
		kind                 chaosFault
		count                int
		latest, unserved     time.Duration
		unservedPiece, fault string
	}{
		{faultSlow, 2, 1500 * time.Millisecond, 7 * time.Second, "partition/2", "fault 1"},
		{faultThrottled, 0, 0, 20 * time.Second, "partition/3", "fault 2"},
	} {
		f := figures[tc.kind]
		if f == nil {
			t.Errorf("%s: no figures", tc.kind)
			continue
		}
		if f.pastAuthority != tc.count || f.latestPast != tc.latest || f.unserved != tc.unserved || f.unservedPiece != tc.unservedPiece || f.unservedFaults != tc.fault {
			t.Errorf("%s: %+v, want %d past authority (latest %v), unserved %v of %s in %s", tc.kind, *f, tc.count, tc.latest, tc.unserved, tc.unservedPiece, tc.fault)
		}
	}
	if len(figures) != 2 {
		t.Errorf("figures for %d kinds, want 2: a write outside every window is charged to none", len(figures))
	}
}

// TestWritesPastAuthority: a write counts against its writer's last run of
// the piece that began before it; one of a run started again after a
// lost authority is that run's, not late.
func TestWritesPastAuthority(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	const piece = "singleton/ttl-controller"
	runs := map[string][]pieceRun{piece: {
		{replica: "fcm-a", start: at(0), end: at(10.2), authorityEnded: at(10), writesUntil: at(12)},
		{replica: "fcm-a", start: at(11), end: at(30), authorityEnded: at(30), writesUntil: at(32)},
		{replica: "fcm-b", start: at(40), end: at(50)},
	}}
	write := func(replica string, received float64) string {
		return fmt.Sprintf(`{"stage":"ResponseComplete","verb":"update","userAgent":"fleet-controller-manager/%s/singleton/ttl-controller/ttl-controller","objectRef":{"resource":"nodes","name":"n"},"responseStatus":{"code":200},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`,
			replica, at(received).Format(time.RFC3339Nano), at(received+0.01).Format(time.RFC3339Nano))
	}
	lines := []string{
		write("fcm-a", 5),    // in the first run
		write("fcm-a", 10.5), // after the first run's authority, before the second run
		write("fcm-a", 11.5), // the second run's
		write("fcm-a", 31),   // after the second run's authority
		write("fcm-b", 45),   // fcm-b's run, no authority lost
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range writesPastAuthority(t, path, runs) {
		got = append(got, fmt.Sprintf("%s %v", p.replica, p.late))
	}
	if want := []string{"fcm-a 500ms", "fcm-a 1s"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("writes past authority %q, want %q", got, want)
	}
}
