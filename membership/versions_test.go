package membership

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestWriteVersion: a member writes the newest State version that every
// live member it observes reads; a member of an older release holds the
// fleet at version 1 until it leaves, and a member narrowed to version 1
// (an older release) reads only that and writes it.
func TestWriteVersion(t *testing.T) {
	type peer struct {
		name     string
		supports string // SupportsAnnotation ("" : a release from before it)
		leaves   bool   // its last state says leaving, and its Lease is deleted
	}
	for _, tc := range []struct {
		name  string
		reads []int // this member's Supports.StateVersions (nil: all)
		peers []peer
		want  int
	}{
		{"alone", nil, nil, StateVersion},
		{"beside a member of this release", nil, []peer{{"b", `{"stateVersions":[1,2,3,4,5]}`, false}}, 5},
		{"beside a member of the release before", nil, []peer{{"b", `{"stateVersions":[1,2,3]}`, false}}, 3},
		{"beside a member of the release before that", nil, []peer{{"b", `{"stateVersions":[1,2]}`, false}}, 2},
		{"beside a release that reads only 1", nil, []peer{{"b", `{"stateVersions":[2]}`, false}, {"c", `{"stateVersions":[1]}`, false}}, 1},
		{"beside a release from before the annotation", nil, []peer{{"b", ``, false}}, 1},
		{"once the older release has left", nil, []peer{{"b", `{"stateVersions":[1,2]}`, false}, {"c", ``, true}}, 2},
		{"beside a member of the release before, reading 4", nil, []peer{{"b", `{"stateVersions":[1,2,3,4]}`, false}}, 4},
		{"a newer release's version is not this member's to write", nil, []peer{{"b", `{"stateVersions":[1,2,3,4,5,6]}`, false}}, 5},
		{"narrowed to the older release", []int{1}, []peer{{"b", `{"stateVersions":[1,2]}`, false}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
			m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Clock: clock,
				Supports: Supports{StateVersions: tc.reads}})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range tc.peers {
				st := State{Incarnation: p.name + "1", Seq: 1, Epoch: 1, Leaving: p.leaves}
				value, err := st.EncodeVersion(1)
				if err != nil {
					t.Fatal(err)
				}
				l := lease(p.name, string(rune('a'+i)), value)
				if p.supports != "" {
					l.Annotations[SupportsAnnotation] = p.supports
				}
				m.observe(l, false)
				if p.leaves {
					m.observe(l, true)
				}
			}
			m.mu.Lock()
			got := m.writeVersionLocked()
			m.mu.Unlock()
			if got != tc.want {
				t.Errorf("writes version %d, want %d", got, tc.want)
			}
		})
	}
}

// TestJoiningWhileAMemberIsUnread: a member whose quiet period is over
// stays joining (owns nothing) while a live member's Lease holds the next
// state version, which it does not read, for that member is invisible to
// it; the join ends when the state is readable or the Lease has not
// changed for a lease duration, and a join that is over stays over. A
// Lease of a version no release beside this one writes is garbage and
// holds no one.
func TestJoiningWhileAMemberIsUnread(t *testing.T) {
	st := State{Incarnation: "b1", Seq: 1, Epoch: 1, Running: []string{"partition/1"}}
	v1, err := st.EncodeVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	st.Seq = 2
	v2, err := st.EncodeVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	v9 := strings.Replace(v2, `"v":2`, `"v":9`, 1)
	type step struct {
		name    string
		do      func(m *Member, clock *clocktesting.FakeClock)
		joining bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"readable again", []step{
			{"a member writes version 2", func(m *Member, _ *clocktesting.FakeClock) { m.observe(lease("b", "1", v2), false) }, true},
			{"it writes version 1", func(m *Member, _ *clocktesting.FakeClock) { m.observe(lease("b", "2", v1), false) }, false},
			{"version 2 again: a join that is over stays over", func(m *Member, _ *clocktesting.FakeClock) { m.observe(lease("b", "3", v2), false) }, false},
		}},
		{"unchanged for a lease duration", []step{
			{"a member writes version 2", func(m *Member, _ *clocktesting.FakeClock) { m.observe(lease("b", "1", v2), false) }, true},
			{"its Lease unchanged for a lease duration", func(m *Member, c *clocktesting.FakeClock) { c.Step(m.cfg.LeaseDuration + time.Second) }, false},
		}},
		{"garbage", []step{
			{"a Lease of version 9", func(m *Member, _ *clocktesting.FakeClock) { m.observe(lease("c", "1", v9), false) }, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
			m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Clock: clock,
				Supports: Supports{StateVersions: []int{1}}})
			if err != nil {
				t.Fatal(err)
			}
			m.mu.Lock()
			m.synced, m.joinedAt = true, clock.Now().Add(-time.Hour)
			m.mu.Unlock()
			for _, s := range tc.steps {
				s.do(m, clock)
				if got := m.Joining(); got != s.joining {
					t.Errorf("%s: joining %v, want %v", s.name, got, s.joining)
				}
			}
		})
	}
}
