package informers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Mode is how the replica caches the namespaced objects its partition
// controllers read.
type Mode string

const (
	// ModeAuto picks ModeShardedWatch when the apiserver honours shard
	// selectors, and ModeNamespaceWatch otherwise.
	ModeAuto Mode = "auto"
	// ModeShardedWatch: the owned cache, one cluster-wide watch per kind,
	// loaded namespaces listed by shard selectors naming them (feature gate
	// ShardedListAndWatch); each replica caches only its own namespaces.
	ModeShardedWatch Mode = "sharded-watch"
	// ModeNamespaceWatch: the owned cache as ModeShardedWatch, but a
	// loaded namespace is listed on its own (or, past a number at once,
	// in one cluster-wide list). Works on every apiserver.
	ModeNamespaceWatch Mode = "namespace-watch"
	// ModeFilteredWatch: one cluster-wide list/watch per kind and replica,
	// seen by the partition controllers through a filter: as few watches as
	// KCM, but every replica caches every object.
	ModeFilteredWatch Mode = "filtered-watch"
)

// Modes lists the values --informer-mode takes.
var Modes = []Mode{ModeAuto, ModeShardedWatch, ModeNamespaceWatch, ModeFilteredWatch}

// ParseMode checks a --informer-mode value.
func ParseMode(s string) (Mode, error) {
	if slices.Contains(Modes, Mode(s)) {
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown informer mode %q (want one of %v)", s, Modes)
}

// Resolve turns ModeAuto into the mode the apiserver supports, and checks
// that ModeShardedWatch is supported when it is asked for explicitly.
func Resolve(ctx context.Context, mode Mode, config *rest.Config) (Mode, error) {
	switch mode {
	case ModeNamespaceWatch, ModeFilteredWatch:
		return mode, nil
	case ModeShardedWatch, ModeAuto:
		err := ProbeShardedWatch(ctx, config)
		switch {
		case err == nil:
			return ModeShardedWatch, nil
		case mode == ModeAuto && errors.Is(err, ErrShardedWatchUnsupported):
			klog.FromContext(ctx).Info("The apiserver does not shard lists; the replica watches each namespace it owns", "informerMode", ModeNamespaceWatch, "reason", err.Error())
			return ModeNamespaceWatch, nil
		default:
			return "", fmt.Errorf("informer mode %s: %w", mode, err)
		}
	}
	return "", fmt.Errorf("unknown informer mode %q", mode)
}

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
