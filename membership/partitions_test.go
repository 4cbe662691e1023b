package membership

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestParsePartitions: a member that does not say reads as 0, a count in
// bounds as itself, anything else as an error.
func TestParsePartitions(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"64", 64, false},
		{"4096", 4096, false},
		{"0", 0, true},
		{"-3", 0, true},
		{"4097", 0, true},
		{"many", 0, true},
		{" 64", 0, true},
	} {
		got, err := ParsePartitions(tc.value)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParsePartitions(%q) = %d, %v; want %d, error %v", tc.value, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestOwnLeaseSaysPartitions: a member configured with a partition count
// writes it into its Lease; one without writes no annotation.
func TestOwnLeaseSaysPartitions(t *testing.T) {
	for _, tc := range []struct {
		partitions int
		want       string
		written    bool
	}{
		{256, "256", true},
		{0, "", false},
	} {
		m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Partitions: tc.partitions})
		if err != nil {
			t.Fatal(err)
		}
		own := m.leaseObject(&coordinationv1.Lease{}, "state", time.Now())
		got, written := own.Annotations[PartitionsAnnotation]
		if got != tc.want || written != tc.written {
			t.Errorf("partitions %d: annotation %q (written %v), want %q (written %v)", tc.partitions, got, written, tc.want, tc.written)
		}
	}
	if _, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Fleet: "f", Identity: "self", Partitions: maxPartitions + 1}); err == nil {
		t.Error("a partition count over the bound was accepted")
	}
}
