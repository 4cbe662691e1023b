package informers

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// resyncEvery calls resync (every object, as an update to itself) every
// period, jittered 10%, once synced, until stop is called or end closes. It
// is a handler's own resync: once a shared informer has started, client-go
// raises a shorter period to the informer's (12 to 24 hours), but the
// namespace and resourcequota controllers ask for 5 minutes and the HPA for
// 15 s, as KCM gives them.
func resyncEvery(end <-chan struct{}, synced func() bool, resync func(), period time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-end:
				return
			case <-time.After(wait.Jitter(period, 0.1)):
			}
			if synced() {
				resync()
			}
		}
	}()
	return func() { close(done) }
}
