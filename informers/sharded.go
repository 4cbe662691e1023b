package informers

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ErrShardedWatchUnsupported: the apiserver ignores shard selectors.
var ErrShardedWatchUnsupported = errors.New("the apiserver does not filter lists by shardSelector (feature gate ShardedListAndWatch is off)")

// everyShard selects every namespace: the probe's selector.
const everyShard = "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"

// ProbeShardedWatch checks that the apiserver honours shard selectors: one
// that applied it echoes it in the list's shardInfo, whatever it holds.
func ProbeShardedWatch(ctx context.Context, config *rest.Config) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("probing sharded watch: %w", err)
	}
	list, err := client.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1, ShardSelector: everyShard})
	if err != nil {
		return fmt.Errorf("probing sharded watch: %w", err)
	}
	if list.ShardInfo == nil {
		return ErrShardedWatchUnsupported
	}
	if list.ShardInfo.Selector != everyShard {
		return fmt.Errorf("probing sharded watch: the apiserver applied %q for %q: %w", list.ShardInfo.Selector, everyShard, ErrShardedWatchUnsupported)
	}
	return nil
}
