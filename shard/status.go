package shard

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
)

// FleetStatus is what a fleet's Leases say: each member, its health, and
// the pieces it runs. The status command prints it; /debug/fleet shows it.
type FleetStatus struct {
	Fleet      string         `json:"fleet"`
	Namespace  string         `json:"namespace"`
	ObservedAt time.Time      `json:"observedAt"`
	Partitions int            `json:"partitions"`
	Members    []MemberStatus `json:"members"`
	// UnownedPartitions are partitions no member lists as running.
	UnownedPartitions []int `json:"unownedPartitions"`
	// Objects is what the live members' partitions hold (weights.go);
	// Busiest is the largest member's Objects over the mean of the
	// members that run partitions (1: even; 0: nothing measured).
	Objects uint64  `json:"objects"`
	Busiest float64 `json:"busiest"`
	// Balance says in a line why the busiest member stays above the
	// bound placement by weight evens the members to ("" within it).
	Balance string `json:"balance,omitempty"`
	// LeaderLease is kube-controller-manager's leader Lease, when the fleet
	// holds it (nil when not read).
	LeaderLease *LeaderLeaseStatus `json:"leaderLease,omitempty"`
}

// LeaderLeaseStatus is kube-controller-manager's leader Lease as read.
type LeaderLeaseStatus struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Holder    string    `json:"holder"`
	Renewed   time.Time `json:"renewed"`
	// HeldByFleet: the holder is a replica of this fleet.
	HeldByFleet bool `json:"heldByFleet"`
	// Missing: the Lease does not exist (no KCM or fleet has held it).
	Missing bool `json:"missing,omitempty"`
}

// ReadLeaderLease reads kube-controller-manager's leader Lease
// namespace/name and says whether fleet (in fleetNamespace) holds it.
func ReadLeaderLease(ctx context.Context, store membership.LeaseStore, namespace, name, fleetNamespace, fleet string) (*LeaderLeaseStatus, error) {
	out := &LeaderLeaseStatus{Namespace: namespace, Name: name}
	lease, err := store.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		out.Missing = true
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading kube-controller-manager's leader lease %s/%s: %w", namespace, name, err)
	}
	if lease.Spec.HolderIdentity != nil {
		out.Holder = *lease.Spec.HolderIdentity
	}
	if lease.Spec.RenewTime != nil {
		out.Renewed = lease.Spec.RenewTime.Time
	}
	out.HeldByFleet = strings.HasPrefix(out.Holder, membership.FleetHolderPrefix(fleetNamespace, fleet))
	return out, nil
}

// Describe says in a line who holds the Lease and what it means for the
// fleet.
func (l *LeaderLeaseStatus) Describe(now time.Time) string {
	where := "kube-controller-manager's leader lease " + l.Namespace + "/" + l.Name
	switch {
	case l.Missing:
		return where + ": does not exist yet; the fleet creates it when it starts"
	case l.HeldByFleet:
		return fmt.Sprintf("%s: held by the fleet (last renewed by %s, %s ago)", where, l.Holder, now.Sub(l.Renewed).Round(time.Second))
	case l.Holder == "":
		return where + ": released; the first kube-controller-manager or fleet replica to try takes it"
	default:
		return fmt.Sprintf("%s: held by %s (renewed %s ago); waiting for kube-controller-manager %s to release its leader lease, the fleet runs nothing", where, l.Holder, now.Sub(l.Renewed).Round(time.Second), l.Holder)
	}
}

// Member health, from its Lease.
const (
	MemberReady      = "ready"      // renewing, in the ring
	MemberJoining    = "joining"    // renewing, in its quiet period: owns nothing yet
	MemberLeaving    = "leaving"    // stopped everything, about to delete its Lease
	MemberExpired    = "expired"    // not renewed for a lease duration: dead or cut off
	MemberUnreadable = "unreadable" // its state annotation is not one we understand
)

// MemberStatus is one member as its Lease shows it.
type MemberStatus struct {
	Name        string        `json:"name"`
	Health      string        `json:"health"`
	Renewed     time.Time     `json:"renewed"`
	Lease       time.Duration `json:"leaseDurationNanos"`
	Incarnation string        `json:"incarnation,omitempty"`
	View        string        `json:"view,omitempty"`
	Epoch       uint64        `json:"epoch"`
	Partitions  []int         `json:"partitions"`
	Singletons  []string      `json:"singletons"`
	// Objects is what its partitions hold, as their weights in its state
	// say (quantized); Measured counts the partitions that have one.
	Objects  uint64 `json:"objects"`
	Measured int    `json:"measuredPartitions"`
	// Heaviest is its partition that holds the most, and what it holds.
	Heaviest        int    `json:"heaviestPartition"`
	HeaviestObjects uint64 `json:"heaviestObjects"`
	// ByWeight: its Lease says it places by weight.
	ByWeight bool `json:"placesByWeight"`
	// weights is what each of its partitions holds.
	weights map[int]uint64
	// Share is Objects over the fleet's Objects (0 to 1).
	Share float64 `json:"share"`
	// Loading: its running partitions still loading into its cache (its
	// controllers do not serve them yet), as its last state write says.
	Loading []PartitionLoad `json:"loading,omitempty"`
	Problem string          `json:"problem,omitempty"`
}

// LocalLoad is a load of partitions in progress on this replica, with
// what it waits for (informers.LoadWait, one line per informer).
type LocalLoad struct {
	Partitions []int     `json:"partitions"`
	Since      time.Time `json:"since"`
	Waiting    []string  `json:"waiting,omitempty"`
}

// PartitionLoad is one partition loading on a member since Since.
type PartitionLoad struct {
	Partition int       `json:"partition"`
	Since     time.Time `json:"since"`
}

// StuckLoads lists, per member, the loads that have gone on for longer
// than its lease duration at now: a load takes milliseconds to seconds,
// so one older than that waits for something that does not come.
func (s FleetStatus) StuckLoads() []string {
	var out []string
	for _, m := range s.Members {
		if m.Health == MemberExpired {
			continue
		}
		for _, l := range m.Loading {
			if took := s.ObservedAt.Sub(l.Since); took > m.Lease {
				out = append(out, fmt.Sprintf("partition %d has been loading on %s for %s, longer than a lease duration (%s): its controllers do not serve it; /debug/fleet/cache on %s says what the load waits for", l.Partition, m.Name, took.Round(time.Second), m.Lease, m.Name))
			}
		}
	}
	return out
}

// ReadFleet lists the fleet's Leases and summarises them, for a fleet of
// partitions (0: what the Leases say, FleetPartitions). One read has no
// history to judge expiry by the observer's clock, as membership does: a
// member counts as expired once its writer's renew time is a lease
// duration old, which clock skew between machines can shift.
func ReadFleet(ctx context.Context, store membership.LeaseStore, namespace, fleet string, partitions int) (FleetStatus, error) {
	leases, err := store.List(ctx, namespace, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{membership.FleetLabel: fleet}).String(),
	})
	if err != nil {
		return FleetStatus{}, fmt.Errorf("listing the Leases of fleet %s in %s: %w", fleet, namespace, err)
	}
	now := time.Now()
	if partitions == 0 {
		partitions, _, _ = FleetPartitions(leases.Items, now)
	}
	return FleetStatusFromLeases(leases.Items, namespace, fleet, partitions, now), nil
}

// FleetStatusFromLeases summarises Leases as seen at now.
func FleetStatusFromLeases(leases []coordinationv1.Lease, namespace, fleet string, partitions int, now time.Time) FleetStatus {
	out := FleetStatus{Fleet: fleet, Namespace: namespace, ObservedAt: now, Partitions: partitions, Members: []MemberStatus{}}
	owned := map[int]bool{}
	for _, l := range leases {
		m := MemberStatus{Name: l.Name, Partitions: []int{}, Singletons: []string{}}
		if l.Spec.RenewTime != nil {
			m.Renewed = l.Spec.RenewTime.Time
		}
		if l.Spec.LeaseDurationSeconds != nil {
			m.Lease = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		if supports, err := membership.ParseSupports(l.Annotations[membership.SupportsAnnotation]); err == nil {
			m.ByWeight = slices.ContainsFunc(supports.Placements, ByWeight)
		}
		st, err := membership.ParseState(l.Annotations[membership.StateAnnotation])
		switch {
		case err != nil:
			m.Health, m.Problem = MemberUnreadable, err.Error()
		case !leaseLive(&l, now):
			m.Health = MemberExpired
		case st.Leaving:
			m.Health = MemberLeaving
		case st.Joining:
			m.Health = MemberJoining
		default:
			m.Health = MemberReady
		}
		if err == nil {
			m.read(st)
			if m.Health != MemberExpired {
				for _, i := range m.Partitions {
					owned[i] = true
				}
			}
		}
		out.Members = append(out.Members, m)
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	out.weigh()
	out.UnownedPartitions = []int{}
	for i := range partitions {
		if !owned[i] {
			out.UnownedPartitions = append(out.UnownedPartitions, i)
		}
	}
	return out
}

// read fills in what m's state says: its view, pieces, weights and loads.
func (m *MemberStatus) read(st membership.State) {
	m.Incarnation, m.View, m.Epoch = st.Incarnation, st.View, st.Epoch
	for _, name := range st.Running {
		p := Piece(name)
		if i := p.Partition(); i >= 0 {
			m.Partitions = append(m.Partitions, i)
		} else {
			m.Singletons = append(m.Singletons, p.Name())
		}
	}
	sort.Ints(m.Partitions)
	sort.Strings(m.Singletons)
	for p, w := range st.Weights {
		m.Objects += w
		m.Measured++
		if m.weights == nil {
			m.weights = map[int]uint64{}
		}
		m.weights[p] = w
		if w > m.HeaviestObjects || (w == m.HeaviestObjects && p < m.Heaviest) {
			m.Heaviest, m.HeaviestObjects = p, w
		}
	}
	for p, since := range st.Loading {
		m.Loading = append(m.Loading, PartitionLoad{Partition: p, Since: time.Unix(since, 0)})
	}
	sort.Slice(m.Loading, func(i, j int) bool { return m.Loading[i].Partition < m.Loading[j].Partition })
}

// weigh sums the live members' objects into each one's share and the
// busiest one's load against the mean.
func (s *FleetStatus) weigh() {
	var busiest uint64
	running := 0
	for _, m := range s.Members {
		if m.Health == MemberExpired || len(m.Partitions) == 0 {
			continue
		}
		s.Objects += m.Objects
		busiest = max(busiest, m.Objects)
		running++
	}
	if s.Objects == 0 {
		return
	}
	for i := range s.Members {
		if s.Members[i].Health != MemberExpired {
			s.Members[i].Share = float64(s.Members[i].Objects) / float64(s.Objects)
		}
	}
	s.Busiest = float64(busiest) * float64(running) / float64(s.Objects)
	s.Balance = s.explainBalance(running)
}

// PartitionOwners maps each partition a live member lists as running to
// that member: who serves it now, as the Leases say (an expired member's
// partitions are unowned, as in UnownedPartitions). Mid-handover a
// partition can be listed by two members at once; the later of them in
// the status's order wins.
func (s FleetStatus) PartitionOwners() map[int]string {
	owners := map[int]string{}
	for _, m := range s.Members {
		if m.Health == MemberExpired {
			continue
		}
		for _, p := range m.Partitions {
			owners[p] = m.Name
		}
	}
	return owners
}

// WriteTable prints the status as a table.
func (s FleetStatus) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tHEALTH\tRENEWED\tEPOCH\tPARTITIONS\tOBJECTS\tSINGLETONS")
	for _, m := range s.Members {
		renewed := "never"
		if !m.Renewed.IsZero() {
			renewed = s.ObservedAt.Sub(m.Renewed).Round(time.Second).String() + " ago"
		}
		singletons := strings.Join(m.Singletons, ",")
		if singletons == "" {
			singletons = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d: %s\t%s\t%s\n", m.Name, m.Health, renewed, m.Epoch,
			len(m.Partitions), shortRanges(m.Partitions, rangesWidth), m.describeObjects(), singletons)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Busiest > 0 {
		if _, err := fmt.Fprintf(w, "\nobjects in the partitions: %d; the busiest member holds %.2fx the mean\n", s.Objects, s.Busiest); err != nil {
			return err
		}
	}
	if s.Balance != "" {
		if _, err := fmt.Fprintln(w, s.Balance); err != nil {
			return err
		}
	}
	if len(s.UnownedPartitions) > 0 {
		if _, err := fmt.Fprintf(w, "\npartitions no live member runs: %s\n", CompactRanges(s.UnownedPartitions)); err != nil {
			return err
		}
	}
	for _, m := range s.Members {
		if len(m.Loading) == 0 || m.Health == MemberExpired {
			continue
		}
		var loads []string
		for _, l := range m.Loading {
			loads = append(loads, fmt.Sprintf("%d (for %s)", l.Partition, s.ObservedAt.Sub(l.Since).Round(time.Second)))
		}
		if _, err := fmt.Fprintf(w, "\n%s is loading partitions %s\n", m.Name, strings.Join(loads, ", ")); err != nil {
			return err
		}
	}
	for _, stuck := range s.StuckLoads() {
		if _, err := fmt.Fprintf(w, "STUCK: %s\n", stuck); err != nil {
			return err
		}
	}
	if s.LeaderLease != nil {
		if _, err := fmt.Fprintf(w, "\n%s\n", s.LeaderLease.Describe(s.ObservedAt)); err != nil {
			return err
		}
	}
	return nil
}

// describeObjects is the member's objects and share, "-" when none of its
// partitions is measured (a release that does not publish weights).
func (m MemberStatus) describeObjects() string {
	if m.Measured == 0 {
		return "-"
	}
	out := fmt.Sprintf("%d (%.0f%%)", m.Objects, 100*m.Share)
	if m.Measured < len(m.Partitions) {
		out += fmt.Sprintf(", %d of %d partitions measured", m.Measured, len(m.Partitions))
	}
	return out
}

// rangesWidth: the most characters of partition ranges a table row shows.
// A member's share of 256 partitions spans about 50 ranges, which would
// push the other columns off a terminal; -o json and /debug/fleet list
// them all.
const rangesWidth = 40

// shortRanges is CompactRanges cut after the range that reaches width
// characters, marked "...".
func shortRanges(sorted []int, width int) string {
	all := CompactRanges(sorted)
	if len(all) <= width {
		return all
	}
	if i := strings.LastIndexByte(all[:width+1], ','); i > 0 {
		return all[:i] + ",..."
	}
	return all[:width] + "..."
}

// CompactRanges writes sorted numbers as ranges: 0-3,7,9-10.
func CompactRanges(sorted []int) string {
	if len(sorted) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(sorted[i]))
		} else {
			parts = append(parts, strconv.Itoa(sorted[i])+"-"+strconv.Itoa(sorted[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
