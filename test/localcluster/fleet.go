package localcluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// FleetSettled says, from the member Leases, whether replicas members have
// joined and together run every one of the fleet's partitions (as its
// Leases say, shard.FleetPartitions), no piece listed by two; if not, why.
func FleetSettled(ctx context.Context, client kubernetes.Interface, replicas int) (bool, string, error) {
	leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: membership.FleetLabel})
	if err != nil {
		return false, "", fmt.Errorf("listing the member Leases: %w", err)
	}
	members, pieces := 0, map[string]int{}
	for _, l := range leases.Items {
		st, err := membership.ParseState(l.Annotations[membership.StateAnnotation])
		if err != nil || st.Joining || st.Leaving {
			continue
		}
		members++
		for _, p := range st.Running {
			pieces[p]++
		}
	}
	partitions := 0
	for p, n := range pieces {
		if n > 1 {
			return false, p + " listed by two members", nil
		}
		if strings.HasPrefix(p, "partition/") {
			partitions++
		}
	}
	want, _, _ := shard.FleetPartitions(leases.Items, time.Now())
	return members == replicas && partitions == want, fmt.Sprintf("%d of %d members, %d of %d partitions running", members, replicas, partitions, want), nil
}
