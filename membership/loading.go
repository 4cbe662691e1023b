package membership

import "time"

// SetLoading sets the partitions this member runs whose objects are
// still being loaded into its cache, each with when its load began, to
// be written with the next write of its state (a renewal at the latest),
// as the weights are: a load that ends before then is never written, so
// only a slow one costs anything, and it costs no write of its own.
func (m *Member) SetLoading(loading map[int]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loading = loading
}

// loadingOfLocked is the set loading of the partitions among running,
// in Unix seconds. m.mu is held.
func (m *Member) loadingOfLocked(running []string) map[int]int64 {
	if len(m.loading) == 0 {
		return nil
	}
	out := map[int]int64{}
	for _, p := range runningPartitions(running) {
		if since, ok := m.loading[p]; ok {
			out[p] = max(since.Unix(), 1)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
