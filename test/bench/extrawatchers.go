package main

import (
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// startExtraPodWatchers opens n cluster-wide Pod informers from the bench
// process, each on its own client, as n more replicas' Pod watches would:
// an experiment (-extra-pod-watchers) to tell how much of what the
// apiserver closes follows the number of cluster-wide Pod watchers. The
// informers are stopped with the bench's context.
func (b *bench) startExtraPodWatchers(n int) error {
	for i := range n {
		cfg, err := b.cluster.RESTConfig()
		if err != nil {
			return err
		}
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.UserAgent = fmt.Sprintf("bench-extra-pod-watcher-%d", i)
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("extra Pod watcher %d: %w", i, err)
		}
		factory := informers.NewSharedInformerFactory(client, 0)
		informer := factory.Core().V1().Pods().Informer()
		factory.Start(b.ctx.Done())
		if !cache.WaitForCacheSync(b.ctx.Done(), informer.HasSynced) {
			return fmt.Errorf("extra Pod watcher %d: not synced", i)
		}
	}
	return nil
}
