package informers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestNamespaceReadsAnswerWithALaterRead checks the two promises of the
// shared namespace reads: a caller is answered by a read sent after it
// asked (it sees a namespace created just before its call, while an
// earlier read was on its way), and callers asking together share reads.
func TestNamespaceReadsAnswerWithALaterRead(t *testing.T) {
	var mu sync.Mutex
	server := []string{"a"}
	reads := 0
	inFirst, releaseFirst := make(chan struct{}), make(chan struct{})
	r := &namespaceReads{read: func(ctx context.Context) ([]string, error) {
		mu.Lock()
		reads++
		n := reads
		names := slices.Clone(server)
		mu.Unlock()
		if n == 1 {
			close(inFirst)
			<-releaseFirst
		}
		return names, nil
	}}
	ctx := context.Background()
	first := make(chan []string)
	go func() {
		names, _ := r.get(ctx)
		first <- names
	}()
	<-inFirst
	// Created while the first read is on its way, after it read.
	mu.Lock()
	server = append(server, "b")
	mu.Unlock()
	const callers = 10
	answers := make(chan []string, callers)
	for range callers {
		go func() {
			names, err := r.get(ctx)
			if err != nil {
				t.Error(err)
			}
			answers <- names
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		waiting := r.next != nil && r.next.callers == callers
		r.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the callers never came to wait for the next read")
		}
	}
	close(releaseFirst)
	if got := <-first; fmt.Sprint(got) != "[a]" {
		t.Errorf("the first caller got %v, want [a]", got)
	}
	for range callers {
		if got := <-answers; fmt.Sprint(got) != "[a b]" {
			t.Errorf("a caller that asked after b was created got %v", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 2 {
		t.Errorf("%d callers asking together made %d reads, want 2: the one on its way and the next, shared", callers+1, reads)
	}
}
