package informers

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ShardedConfig returns a copy of config whose list and watch requests carry
// selector as ListOptions.ShardSelector (server-side sharded list/watch,
// feature gate ShardedListAndWatch). Only informers of namespaced kinds may
// use it: a cluster-scoped kind has no namespace to shard on.
func ShardedConfig(config *rest.Config, selector string) *rest.Config {
	c := rest.CopyConfig(config)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &shardSelectorRoundTripper{next: rt, selector: selector}
	})
	return c
}

type shardSelectorRoundTripper struct {
	next     http.RoundTripper
	selector string
}

func (s *shardSelectorRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return s.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	q := r.URL.Query()
	q.Set("shardSelector", s.selector)
	r.URL.RawQuery = q.Encode()
	return s.next.RoundTrip(r)
}

// ErrShardedWatchUnsupported: the apiserver ignores shard selectors.
var ErrShardedWatchUnsupported = errors.New("the apiserver does not filter lists by shardSelector (feature gate ShardedListAndWatch is off)")

// ProbeShardedWatch checks that the apiserver honours shard selectors: a
// list of Services in all namespaces (default/kubernetes always exists) with
// a selector matching (almost) no namespace must come back empty. A server that ignores the selector would
// give every partition piece every namespace, so this is checked before any
// piece runs.
func ProbeShardedWatch(ctx context.Context, config *rest.Config) error {
	plain, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("probing sharded watch: %w", err)
	}
	all, err := plain.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("probing sharded watch: %w", err)
	}
	if len(all.Items) == 0 {
		return fmt.Errorf("probing sharded watch: no Service in the cluster to probe with: %w", ErrShardedWatchUnsupported)
	}
	sharded, err := kubernetes.NewForConfig(ShardedConfig(config, "shardRange(object.metadata.namespace, '0x0000000000000000', '0x0000000000000001')"))
	if err != nil {
		return fmt.Errorf("probing sharded watch: %w", err)
	}
	none, err := sharded.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("probing sharded watch: %w: %w", ErrShardedWatchUnsupported, err)
	}
	if len(none.Items) > 0 {
		return ErrShardedWatchUnsupported
	}
	return nil
}
