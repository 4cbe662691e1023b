package informers

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// resyncEvery calls resync (which tells a handler of every object its
// informer holds, as updates to themselves) every period (with 10%
// jitter) once synced says so, until the returned stop is called or end
// closes (the piece or the replica stops): a resync of the handler's
// own. client-go lets a handler ask for a shorter resync than its
// informer's only before the informer starts; a shared informer of the
// replica may have started long before a piece's controller adds its
// handler, and client-go then raises the period to the informer's (12 to
// 24 hours). The namespace and resourcequota controllers ask for 5
// minutes (their sync periods) and the HPA for 15 s, which KCM gives
// them.
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
