package shard

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// dealView is the view of members fcm-0..n-1 placing by weight with the
// colocated singletons' owner keeping share, as fcm-0 sees it with table.
func dealView(n int, share float64, table string) Plan {
	config := DefaultRingConfig
	config.Colocated = "garbagecollector,podgc"
	config.ColocatedShare, config.ColocatedShareByWeight = share, share
	local := Local{Self: "fcm-0", Ring: config, Placements: Placements, WeightTable: table}
	var peers []membership.Peer
	for i := 1; i < n; i++ {
		peers = append(peers, membership.Peer{Name: fmt.Sprintf("fcm-%d", i), Participant: true, Supports: membership.Supports{Placements: Placements}})
	}
	view, _ := viewOf(local, peers)
	return view
}

// weighEvery is each of partitions weighing w.
func weighEvery(partitions int, w uint64) map[int]uint64 {
	measured := map[int]uint64{}
	for p := range partitions {
		measured[p] = w
	}
	return measured
}

// startDealing is a keeper of members placing by weight (the colocated
// owner's share as given) whose every partition weighs 6, with a hold
// longer than a test (only deals change its table), after its first step
// with no new namespace: fresh is what its newNamespaces returns.
func startDealing(t *testing.T, members int, share float64) (Plan, map[int]uint64, map[string]int, *weightKeeper, time.Time) {
	t.Helper()
	view := dealView(members, share, "")
	measured := weighEvery(view.Ring.Partitions, 6)
	fresh := map[string]int{}
	k := &weightKeeper{hold: time.Hour, newNamespaces: func(time.Duration) FreshNamespaces { return FreshNamespaces{Fresh: maps.Clone(fresh)} }}
	start := time.Unix(1000, 0)
	if got := k.next(start, "", view, measured); got != "" {
		t.Fatalf("a table with no new namespace: %.20s", got)
	}
	return view, measured, fresh, k, start
}

// TestWeightKeeperDeals: namespaces created together are dealt at once,
// in batches as they appear (or one by one), so that the members' new namespaces follow
// their capacities (the colocated singletons' owner having
// ColocatedShare of one) within one partition's worth, though every
// partition holds older namespaces; only partitions with new namespaces
// move and the colocated singletons' stays; and the same namespaces
// again, or once they are no longer new, deal nothing.
func TestWeightKeeperDeals(t *testing.T) {
	const namespaces = 20
	for _, tc := range []struct {
		members, batch int
		share          float64
	}{{3, 10, 1}, {5, 10, 1}, {3, 10, 0.5}, {5, 10, 0.5}, {3, 1, 1}, {5, 1, 1}} {
		t.Run(fmt.Sprintf("%d members, share %v, in batches of %d", tc.members, tc.share, tc.batch), func(t *testing.T) {
			view, measured, fresh, k, start := startDealing(t, tc.members, tc.share)
			config := view.Ring
			table := ""
			perPartition := map[int]int{}
			for i := range namespaces {
				ns := fmt.Sprintf("load-%d", i)
				fresh[ns] = config.NamespacePartition(ns)
				perPartition[fresh[ns]]++
				if (i+1)%tc.batch == 0 {
					view = dealView(tc.members, tc.share, table)
					table = k.next(start.Add(time.Duration(2+i)*time.Second), table, view, measured)
				}
			}
			view = dealView(tc.members, tc.share, table)
			r := NewRing(view.Ring, view.Members)
			unmoved := NewRing(dealView(tc.members, tc.share, "").Ring, view.Members)
			heavy, pinned := r.heavyOf()
			if r.PartitionOwner(pinned) != unmoved.PartitionOwner(pinned) {
				t.Errorf("the colocated singletons' partition moved")
			}
			got, ring := map[string]int{}, map[string]int{}
			for p, n := range perPartition {
				got[r.PartitionOwner(p)] += n
				ring[unmoved.PartitionOwner(p)] += n
			}
			largest := 0
			for _, n := range perPartition {
				largest = max(largest, n)
			}
			capacity := float64(tc.members-1) + tc.share
			for _, m := range view.Members {
				c := 1.0
				if m == heavy {
					c = tc.share
				}
				fair := float64(namespaces) * c / capacity
				if float64(got[m]) > math.Ceil(fair)+float64(largest-1) {
					t.Errorf("%s runs %d new namespaces, its fair share %.1f (largest partition %d)", m, got[m], fair, largest)
				}
			}
			t.Logf("new namespaces per member: dealt %v, by the ring %v", got, ring)
			for p := range config.Partitions {
				if r.PartitionOwner(p) != unmoved.PartitionOwner(p) && perPartition[p] == 0 {
					t.Errorf("partition %d moved, and it has no new namespace", p)
				}
			}
			if next := k.next(start.Add(30*time.Second), table, view, measured); next != table {
				t.Errorf("a new table from namespaces already dealt")
			}
			// Old now, and gone from the new namespaces.
			clear(fresh)
			if next := k.next(start.Add(time.Second+YoungWindow), table, view, measured); next != table {
				t.Errorf("a new table from namespaces no longer new")
			}
		})
	}
}

// TestWeightKeeperDealsOneAtATime: namespaces created further apart than
// YoungWindow move nothing.
func TestWeightKeeperDealsOneAtATime(t *testing.T) {
	view := dealView(3, 1, "")
	measured := weighEvery(view.Ring.Partitions, 6)
	fresh := map[string]int{}
	k := weightKeeper{newNamespaces: func(time.Duration) FreshNamespaces { return FreshNamespaces{Fresh: maps.Clone(fresh)} }}
	start := time.Unix(1000, 0)
	for i := range 10 {
		ns := fmt.Sprintf("load-%d", i)
		clear(fresh)
		fresh[ns] = view.Ring.NamespacePartition(ns)
		if got := k.next(start.Add(time.Duration(i)*2*YoungWindow), "", view, measured); got != "" {
			t.Fatalf("%s moved a partition", ns)
		}
	}
}

// TestWeightKeeperHoldLeavesDealtPartitions: a load uneven for the hold
// is balanced while a partition a deal moved is young, and that partition
// stays where the deal put it.
func TestWeightKeeperHoldLeavesDealtPartitions(t *testing.T) {
	view := dealView(3, 1, "")
	config := view.Ring
	ring := NewRing(config, view.Members)
	measured := map[int]uint64{}
	for p := range config.Partitions {
		measured[p] = 10
		if ring.PartitionOwner(p) == "fcm-1" {
			measured[p] = 500
		}
	}
	fresh := map[string]int{}
	const hold = 15 * time.Second // shorter than YoungWindow, as the bench's
	k := weightKeeper{hold: hold, newNamespaces: func(time.Duration) FreshNamespaces { return FreshNamespaces{Fresh: maps.Clone(fresh)} }}
	start := time.Unix(1000, 0)
	if got := k.next(start.Add(-time.Second), "", view, measured); got != "" {
		t.Fatalf("a table before any new namespace")
	}
	// Two new namespaces in partitions of fcm-0: one is dealt to another
	// member.
	for i := 0; len(fresh) < 2; i++ {
		ns := fmt.Sprintf("n-%d", i)
		if p := config.NamespacePartition(ns); ring.PartitionOwner(p) == "fcm-0" && !slices.Contains(slices.Collect(maps.Values(fresh)), p) {
			fresh[ns] = p
		}
	}
	table := k.next(start, "", view, measured)
	if table == "" || !k.dealt {
		t.Fatalf("nothing dealt")
	}
	dealtTo := map[int]string{}
	dealtRing := NewRing(dealView(3, 1, table).Ring, view.Members)
	for _, p := range fresh {
		if o := dealtRing.PartitionOwner(p); o != "fcm-0" {
			dealtTo[p] = o
		}
	}
	if len(dealtTo) != 1 {
		t.Fatalf("deal moved %v, want one partition", dealtTo)
	}
	// The dealt namespace grows the heaviest: by weight alone, the first
	// partition for the hold to move.
	for p := range dealtTo {
		measured[p] = 2000
	}
	view = dealView(3, 1, table)
	k.next(start.Add(time.Second), table, view, measured)
	held := k.next(start.Add(time.Second+hold), table, view, measured)
	if held == table || k.dealt {
		t.Fatalf("no table by the hold with a dealt partition young")
	}
	r := NewRing(dealView(3, 1, held).Ring, view.Members)
	for p, o := range dealtTo {
		if r.PartitionOwner(p) != o {
			t.Errorf("the hold's table moved partition %d, dealt to %s %v ago, to %s", p, o, hold, r.PartitionOwner(p))
		}
	}
}

// TestWeightKeeperDealMoves: a new namespace in every partition moves
// no more partitions than the members hold beyond their fair counts, and
// leaves none beyond it; namespaces there at the keeper's first step are
// neither dealt nor counted; and no weight need be measured yet.
func TestWeightKeeperDealMoves(t *testing.T) {
	for _, tc := range []struct {
		members int
		share   float64
	}{{3, 0.5}, {3, 1}, {5, 1}} {
		t.Run(fmt.Sprintf("%d members, share %v", tc.members, tc.share), func(t *testing.T) {
			view := dealView(tc.members, tc.share, "")
			config := view.Ring
			onePer := map[string]int{}
			named := map[int]bool{}
			for i := 0; len(named) < config.Partitions; i++ {
				ns := fmt.Sprintf("probe-%d", i)
				if p := config.NamespacePartition(ns); !named[p] {
					named[p], onePer[ns] = true, p
				}
			}
			fresh := map[string]int{}
			k := weightKeeper{newNamespaces: func(time.Duration) FreshNamespaces { return FreshNamespaces{Fresh: maps.Clone(fresh)} }}
			start := time.Unix(1000, 0)
			// At the first step, the first half is there already.
			for ns, p := range onePer {
				if p < config.Partitions/2 {
					fresh[ns] = p
				}
			}
			if got := k.next(start, "", view, nil); got != "" {
				t.Fatalf("namespaces there at the first step dealt")
			}
			for ns, p := range onePer {
				fresh[ns] = p
			}
			table := k.next(start.Add(time.Second), "", view, nil)
			r := NewRing(dealView(tc.members, tc.share, table).Ring, view.Members)
			unmoved := NewRing(config, view.Members)
			heavy, _ := unmoved.heavyOf()
			dealt, ring := map[string]int{}, map[string]int{}
			for p := config.Partitions / 2; p < config.Partitions; p++ {
				dealt[r.PartitionOwner(p)]++
				ring[unmoved.PartitionOwner(p)]++
			}
			excess, beyond := 0, 0
			capacity := float64(tc.members-1) + tc.share
			for _, m := range view.Members {
				c := 1.0
				if m == heavy {
					c = tc.share
				}
				fair := math.Ceil(float64(config.Partitions/2) * c / capacity)
				excess += max(0, ring[m]-int(fair))
				beyond = max(beyond, dealt[m]-int(fair))
			}
			moved := 0
			for p := range config.Partitions {
				if r.PartitionOwner(p) != unmoved.PartitionOwner(p) {
					moved++
					if p < config.Partitions/2 {
						t.Errorf("partition %d moved: its namespace was there at the first step", p)
					}
				}
			}
			t.Logf("new namespaces per member: dealt %v, by the ring %v; %d moved, %d beyond fair counts", dealt, ring, moved, excess)
			if moved > excess {
				t.Errorf("%d partitions moved, the members held %d beyond their fair counts", moved, excess)
			}
			if beyond > 0 {
				t.Errorf("a member holds %d new namespaces beyond its fair count", beyond)
			}
		})
	}
}

// TestWeightKeeperDealsABusyTenant: once the members publish their young
// namespaces' work to come, a busy new tenant (over heavyYoung times the
// median) counts as that many namespaces, so the keeper deals its
// neighbours off its member (all but those sharing its partition or the
// colocated singletons'), and the other members share them within one
// partition's worth, also beside namespaces created a moment before
// whose work is done (which count for nothing, and deal nothing as they
// finish); the same weights again deal nothing, and namespaces of alike
// work, however far each got, move nothing after the count.
func TestWeightKeeperDealsABusyTenant(t *testing.T) {
	const tenants = 20
	for _, tc := range []struct {
		name    string
		members int
		// finished: namespaces created just before the tenants, dealt,
		// whose work is done when the tenants come: quiet (done for
		// doneQuiet, counting nothing) or just done (counting one each).
		finished int
		quiet    bool
		weight   func(i int) uint64 // tenant-i's work to come
		busy     bool
	}{
		{"3 members, a busy tenant", 3, 0, true, func(i int) uint64 { return map[bool]uint64{true: 120, false: 8}[i == 0] }, true},
		{"5 members, a busy tenant", 5, 0, true, func(i int) uint64 { return map[bool]uint64{true: 120, false: 8}[i == 0] }, true},
		{"3 members, a busy tenant beside 20 finished namespaces", 3, 20, true, func(i int) uint64 { return map[bool]uint64{true: 300, false: 25}[i == 0] }, true},
		{"5 members, a busy tenant beside 20 finished namespaces", 5, 20, true, func(i int) uint64 { return map[bool]uint64{true: 300, false: 25}[i == 0] }, true},
		// The busy tenant counts short of a member's fair count (17 of
		// 56 over three, 9 of 48 over five), so its member is dealt
		// more: namespaces just done, not tenants with work to come.
		{"3 members, a busy tenant short of a fair share beside 20 just done", 3, 20, false, func(i int) uint64 { return map[bool]uint64{true: 17 * 25, false: 25}[i == 0] }, true},
		{"5 members, a busy tenant short of a fair share beside 20 just done", 5, 20, false, func(i int) uint64 { return map[bool]uint64{true: 9 * 25, false: 25}[i == 0] }, true},
		{"3 members, tenants of alike work", 3, 0, true, func(i int) uint64 { return uint64(5 + i%10) }, false},
		{"3 members, the first tenants' work arrived, the others' not yet", 3, 0, true, func(i int) uint64 { return map[bool]uint64{true: 12, false: 0}[i < 3] }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view, measured, fresh, k, start := startDealing(t, tc.members, 1)
			config := view.Ring
			at := start
			table := ""
			if tc.finished > 0 {
				table = dealFinished(t, k, fresh, tc.members, tc.finished, tc.quiet, &at)
				view = dealView(tc.members, 1, table)
			}
			for i := range tenants {
				ns := fmt.Sprintf("tenant-%d", i)
				fresh[ns] = config.NamespacePartition(ns)
			}
			at = at.Add(time.Second)
			if next := k.next(at, table, view, measured); next != "" {
				table = next
			}
			if k.young == nil {
				k.young = map[string]uint64{}
			}
			for i := range tenants {
				k.young[fmt.Sprintf("tenant-%d", i)] = tc.weight(i)
			}
			view = dealView(tc.members, 1, table)
			at = at.Add(2 * time.Second)
			weighed := k.next(at, table, view, measured)
			if !tc.busy {
				if weighed != table {
					t.Fatal("tenants of alike work dealt again")
				}
				return
			}
			view = dealView(tc.members, 1, weighed)
			r := NewRing(view.Ring, view.Members)
			_, pinned := r.heavyOf()
			busyPartition := fresh["tenant-0"]
			busyOwner := r.PartitionOwner(busyPartition)
			perMember := map[string]int{}
			largest := map[int]int{}
			for ns, p := range fresh {
				if !strings.HasPrefix(ns, "tenant-") {
					continue
				}
				largest[p]++
				owner := r.PartitionOwner(p)
				if ns == "tenant-0" {
					continue
				}
				perMember[owner]++
				if owner == busyOwner && p != busyPartition && p != pinned {
					t.Errorf("%s (partition %d) still shares %s with the busy tenant", ns, p, busyOwner)
				}
			}
			most := slices.Max(slices.Collect(maps.Values(largest)))
			fair := int(math.Ceil(float64(tenants-1) / float64(tc.members-1)))
			for m, n := range perMember {
				if m != busyOwner && n > fair+most-1 {
					t.Errorf("%s runs %d of the other tenants, their fair share %d (largest partition %d)", m, n, fair, most)
				}
			}
			t.Logf("the busy tenant on %s; the other tenants per member: %v", busyOwner, perMember)
			if next := k.next(at.Add(2*time.Second), weighed, view, measured); next != weighed {
				t.Error("the same weights dealt again")
			}
			// The busy tenant's work ends: nothing moves back onto its
			// member, then or once it is quiet.
			k.young["tenant-0"] = 0
			for _, after := range []time.Duration{4 * time.Second, 4*time.Second + doneQuiet} {
				if next := k.next(at.Add(after), weighed, view, measured); next != weighed {
					t.Errorf("the busy tenant's work ending dealt again (%v after)", after)
				}
			}
		})
	}
}

// dealFinished adds n namespaces to fresh, has keeper k deal them, their
// members publish their work and then its end (and, if quiet, it stays
// done for doneQuiet), and fails if that end deals anything; the table
// the keeper has then, with at its last step.
func dealFinished(t *testing.T, k *weightKeeper, fresh map[string]int, members, n int, quiet bool, at *time.Time) string {
	t.Helper()
	config := dealView(members, 1, "").Ring
	for i := range n {
		ns := fmt.Sprintf("finished-%d", i)
		fresh[ns] = config.NamespacePartition(ns)
	}
	measured := weighEvery(config.Partitions, 6)
	*at = at.Add(time.Second)
	table := k.next(*at, "", dealView(members, 1, ""), measured)
	if table == "" {
		t.Fatalf("%d new namespaces dealt nothing", n)
	}
	k.young = map[string]uint64{}
	for _, work := range []uint64{50, 0} {
		for i := range n {
			k.young[fmt.Sprintf("finished-%d", i)] = work
		}
		*at = at.Add(2 * time.Second)
		if next := k.next(*at, table, dealView(members, 1, table), measured); next != table {
			t.Fatalf("namespaces of alike work dealt again as their work came to %d", work)
		}
	}
	if !quiet {
		return table
	}
	// Their work stays done past doneQuiet, and still deals nothing.
	*at = at.Add(doneQuiet)
	if next := k.next(*at, table, dealView(members, 1, table), measured); next != table {
		t.Fatal("namespaces whose work stayed done dealt again")
	}
	return table
}

// TestWeightKeeperLeavesSettlingPartitions: a deal moves no partition
// holding a namespace still settling (its first owner writing its first
// objects), nor records the settled namespaces beside it as dealt; once it
// settles, the next step deals them with the rest.
func TestWeightKeeperLeavesSettlingPartitions(t *testing.T) {
	view := dealView(3, 1, "")
	config := view.Ring
	ring := NewRing(config, view.Members)
	measured := weighEvery(view.Ring.Partitions, 6)
	// On one member (not the colocated owner): five new namespaces in
	// partitions of their own, and in a sixth partition one settled and
	// one settling.
	heavy, _ := ring.heavyOf()
	member := "fcm-1"
	if heavy == member {
		member = "fcm-2"
	}
	fresh := map[string]int{}
	settling := map[int]bool{}
	shared, settled, settlingName := -1, "", ""
	used := map[int]bool{}
	for i := 0; len(used) < 5 || settlingName == ""; i++ {
		ns := fmt.Sprintf("tenant-%d", i)
		p := config.NamespacePartition(ns)
		switch {
		case ring.PartitionOwner(p) != member:
		case shared < 0 && !used[p]:
			shared, settled = p, ns
		case p == shared && settlingName == "":
			settlingName = ns
		case len(used) < 5 && p != shared && !used[p]:
			used[p], fresh[ns] = true, p
		}
	}
	k := &weightKeeper{hold: time.Hour, newNamespaces: func(time.Duration) FreshNamespaces {
		return FreshNamespaces{Fresh: maps.Clone(fresh), Settling: maps.Clone(settling)}
	}}
	start := time.Unix(1000, 0)
	// The keeper's first step, before any of them.
	before := maps.Clone(fresh)
	clear(fresh)
	if got := k.next(start, "", view, measured); got != "" {
		t.Fatalf("a table with no new namespace: %.20s", got)
	}
	maps.Copy(fresh, before)
	fresh[settled], settling[shared] = shared, true

	table := k.next(start.Add(time.Second), "", view, measured)
	if table == "" {
		t.Fatal("six new namespaces on one of three members dealt nothing")
	}
	if owner := NewRing(dealView(3, 1, table).Ring, view.Members).PartitionOwner(shared); owner != member {
		t.Errorf("partition %d, holding a settling namespace, moved to %s", shared, owner)
	}
	if _, ok := k.dealer.dealt[settled]; ok {
		t.Errorf("%s was recorded as dealt while its partition was settling", settled)
	}

	// It settles: seven new namespaces, dealt to at most each member's
	// fair count (its third, rounded up) and the shared partition's two.
	fresh[settlingName] = shared
	clear(settling)
	view = dealView(3, 1, table)
	final := k.next(start.Add(2*time.Second), table, view, measured)
	for _, ns := range []string{settled, settlingName} {
		if _, ok := k.dealer.dealt[ns]; !ok {
			t.Errorf("%s was not dealt once its partition settled", ns)
		}
	}
	r := NewRing(dealView(3, 1, final).Ring, view.Members)
	count := map[string]int{}
	for _, p := range fresh {
		count[r.PartitionOwner(p)]++
	}
	for m, n := range count {
		if n > 3+1 {
			t.Errorf("%s runs %d of %d new namespaces after the deal: %v", m, n, len(fresh), count)
		}
	}
	t.Logf("new namespaces per member: %v", count)
}

// unitsStep is one step of TestDealUnits: what the members publish
// after a time, and what the namespaces not counting one count then.
type unitsStep struct {
	after time.Duration
	young map[string]uint64
	want  map[string]uint64
}

// TestDealUnits steps the deal's count of new namespaces.
//   - finished once quiet: a namespace whose work is done counts one
//     until it has stayed done for doneQuiet (its replica still reports
//     the work), nothing after that, and one again once it has work
//     again; one never published, or published only empty, counts one; a
//     heavy one is weighed only while it has work to come, by its peak,
//     and is never lowered while its work lasts.
//   - heavy by work to come now: a namespace of an earlier burst, a few
//     Pods short of done, is not weighed heavy by that burst's peak
//     beside a later burst of smaller namespaces; the busy one of the
//     later burst is.
func TestDealUnits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fresh map[string]int
		steps []unitsStep
	}{
		{"finished once quiet", map[string]int{"finishing": 1, "working": 2, "unpublished": 3, "empty": 4}, []unitsStep{
			{0, map[string]uint64{"finishing": 50, "working": 50, "empty": 0}, map[string]uint64{}},
			{2 * time.Second, map[string]uint64{"finishing": 0, "working": 40}, map[string]uint64{}},
			// A namespace of a later burst with less work: the one just
			// done is not weighed by its peak against it.
			{3 * time.Second, map[string]uint64{"finishing": 0, "working": 40, "empty": 5, "unpublished": 5}, map[string]uint64{"working": 10}},
			{2*time.Second + doneQuiet - time.Millisecond, map[string]uint64{"finishing": 0, "working": 30}, map[string]uint64{"working": 10}},
			{2*time.Second + doneQuiet, map[string]uint64{"working": 20}, map[string]uint64{"finishing": 0, "working": 10}},
			{3*time.Second + doneQuiet, map[string]uint64{"finishing": 10, "working": 20}, map[string]uint64{"working": 10}},
		}},
		{"heavy by work to come now", map[string]int{"tail": 1, "busy": 2, "small-1": 3, "small-2": 4, "small-3": 5}, []unitsStep{
			{0, map[string]uint64{"tail": 50}, map[string]uint64{}},
			{2 * time.Second, map[string]uint64{"tail": 4, "busy": 60, "small-1": 5, "small-2": 5, "small-3": 5}, map[string]uint64{"busy": 12}},
			{4 * time.Second, map[string]uint64{"tail": 2, "busy": 40, "small-1": 3, "small-2": 3, "small-3": 3}, map[string]uint64{"busy": 12}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			d := &dealer{before: map[string]bool{}}
			for _, step := range tc.steps {
				if got := d.units(start.Add(step.after), tc.fresh, step.young); !maps.Equal(got, step.want) {
					t.Errorf("after %v: units %v, want %v", step.after, got, step.want)
				}
			}
		})
	}
}

// TestWeightKeeperDealsWhatOutlastsAHandover: at a client budget that
// creates more Pods in a handover's time than a new namespace is assumed
// to bring (1000 QPS), 20 new namespaces are not dealt before their work
// is known, nor once it is known to be smaller than a handover's worth;
// 20 whose work outlasts a handover are dealt once it is known; at KCM's
// default budget (20 QPS) they are dealt at once, before their work is
// known, as without a budget.
func TestWeightKeeperDealsWhatOutlastsAHandover(t *testing.T) {
	const namespaces = 20
	for _, tc := range []struct {
		name string
		qps  float32
		work uint64 // each namespace's published Pods to come
		// dealtUnknown, dealtKnown: whether a table comes before the
		// work is published, and once it is.
		dealtUnknown, dealtKnown bool
	}{
		{"1000 QPS, 50 Pods each", 1000, 50, false, false},
		{"1000 QPS, 2000 Pods each", 1000, 2000, false, true},
		{"20 QPS, 50 Pods each", 20, 50, true, false},
		{"no budget known, 50 Pods each", 0, 50, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view, measured, fresh, k, start := startDealing(t, 3, 1)
			k.dealer.payPods = payPods(tc.qps)
			config := view.Ring
			unmoved := NewRing(view.Ring, view.Members)
			// Created where the ring puts them all on one member.
			for i := 0; len(fresh) < namespaces; i++ {
				ns := fmt.Sprintf("load-%d", i)
				if p := config.NamespacePartition(ns); unmoved.PartitionOwner(p) == "fcm-1" {
					fresh[ns] = p
				}
			}
			perMember := func(table string) map[string]int {
				r := NewRing(dealView(3, 1, table).Ring, view.Members)
				got := map[string]int{}
				for _, p := range fresh {
					got[r.PartitionOwner(p)]++
				}
				return got
			}
			table := k.next(start.Add(time.Second), "", view, measured)
			if (table != "") != tc.dealtUnknown {
				t.Fatalf("before the work is known: dealt %v, want %v (per member %v, by the ring %v)", table != "", tc.dealtUnknown, perMember(table), perMember(""))
			}
			k.young = map[string]uint64{}
			for ns := range fresh {
				k.young[ns] = tc.work
			}
			view = dealView(3, 1, table)
			next := k.next(start.Add(3*time.Second), table, view, measured)
			if (next != table) != tc.dealtKnown {
				t.Fatalf("once the work is known: dealt %v, want %v (per member %v, before %v)", next != table, tc.dealtKnown, perMember(next), perMember(table))
			}
			if tc.dealtKnown {
				for m, n := range perMember(next) {
					if n > int(math.Ceil(namespaces/3.0))+1 {
						t.Errorf("%s runs %d of %d new namespaces after the deal: %v", m, n, namespaces, perMember(next))
					}
				}
			}
			if !tc.dealtUnknown && !tc.dealtKnown {
				r := NewRing(dealView(3, 1, next).Ring, view.Members)
				for _, p := range fresh {
					if r.PartitionOwner(p) != unmoved.PartitionOwner(p) {
						t.Errorf("partition %d moved: no namespace's work outlasts a handover", p)
					}
				}
			}
			t.Logf("new namespaces per member: %v, by the ring %v, too small %v", perMember(next), perMember(""), k.dealer.small)
		})
	}
}
