package shard

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

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
	Problem     string        `json:"problem,omitempty"`
}

// ReadFleet lists the fleet's Leases and summarises them.
func ReadFleet(ctx context.Context, client kubernetes.Interface, namespace, fleet string, partitions int) (FleetStatus, error) {
	leases, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{membership.FleetLabel: fleet}).String(),
	})
	if err != nil {
		return FleetStatus{}, fmt.Errorf("listing the Leases of fleet %s in %s: %w", fleet, namespace, err)
	}
	return FleetStatusFromLeases(leases.Items, namespace, fleet, partitions, time.Now()), nil
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
		st, err := membership.ParseState(l.Annotations[membership.StateAnnotation])
		switch {
		case err != nil:
			m.Health, m.Problem = MemberUnreadable, err.Error()
		case m.Renewed.IsZero() || now.Sub(m.Renewed) > m.Lease:
			m.Health = MemberExpired
		case st.Leaving:
			m.Health = MemberLeaving
		case st.Joining:
			m.Health = MemberJoining
		default:
			m.Health = MemberReady
		}
		if err == nil {
			m.Incarnation, m.View, m.Epoch = st.Incarnation, st.View, st.Epoch
			for _, name := range st.Running {
				p := Piece(name)
				if i := p.Partition(); i >= 0 {
					m.Partitions = append(m.Partitions, i)
					if m.Health != MemberExpired {
						owned[i] = true
					}
				} else {
					m.Singletons = append(m.Singletons, p.Name())
				}
			}
			sort.Ints(m.Partitions)
			sort.Strings(m.Singletons)
		}
		out.Members = append(out.Members, m)
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	out.UnownedPartitions = []int{}
	for i := range partitions {
		if !owned[i] {
			out.UnownedPartitions = append(out.UnownedPartitions, i)
		}
	}
	return out
}

// WriteTable prints the status as a table.
func (s FleetStatus) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tHEALTH\tRENEWED\tEPOCH\tPARTITIONS\tSINGLETONS")
	for _, m := range s.Members {
		renewed := "never"
		if !m.Renewed.IsZero() {
			renewed = s.ObservedAt.Sub(m.Renewed).Round(time.Second).String() + " ago"
		}
		singletons := strings.Join(m.Singletons, ",")
		if singletons == "" {
			singletons = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d: %s\t%s\n", m.Name, m.Health, renewed, m.Epoch,
			len(m.Partitions), CompactRanges(m.Partitions), singletons)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.UnownedPartitions) > 0 {
		_, err := fmt.Fprintf(w, "\npartitions no live member runs: %s\n", CompactRanges(s.UnownedPartitions))
		return err
	}
	return nil
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
