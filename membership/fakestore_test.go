package membership

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// fakeStore is a LeaseStore in memory that writes conditionally, as the
// apiserver does, and serves watches. fail, when set, is asked before
// every call and fails it with the error it returns (an outage, a slow
// answer: it may step a fake clock).
type fakeStore struct {
	mu      sync.Mutex
	rv      int
	leases  map[string]*coordinationv1.Lease // namespace/name
	watches map[*storeWatch]bool
	calls   map[string]int // by verb
	fail    func(verb, namespace, name string) error
}

func newFakeStore(leases ...*coordinationv1.Lease) *fakeStore {
	s := &fakeStore{leases: map[string]*coordinationv1.Lease{}, watches: map[*storeWatch]bool{}, calls: map[string]int{}}
	for _, l := range leases {
		s.rv++
		l = l.DeepCopy()
		l.ResourceVersion = strconv.Itoa(s.rv)
		s.leases[l.Namespace+"/"+l.Name] = l
	}
	return s
}

func (s *fakeStore) IsWatchListSemanticsUnSupported() bool { return true }

// setFail replaces the fault hook.
func (s *fakeStore) setFail(fail func(verb, namespace, name string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

// count is how many calls of verb were made, failed ones included.
func (s *fakeStore) count(verb string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[verb]
}

// enter counts a call and asks the fault hook; the hook runs without the
// lock, so it may call the store itself.
func (s *fakeStore) enter(verb, namespace, name string) error {
	s.mu.Lock()
	s.calls[verb]++
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail(verb, namespace, name)
	}
	return nil
}

var leasesResource = coordinationv1.Resource("leases")

func (s *fakeStore) Get(_ context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	if err := s.enter("get", namespace, name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(leasesResource, name)
	}
	return l.DeepCopy(), nil
}

func (s *fakeStore) Create(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := s.enter("create", lease.Namespace, lease.Name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := lease.Namespace + "/" + lease.Name
	if _, ok := s.leases[key]; ok {
		return nil, apierrors.NewAlreadyExists(leasesResource, lease.Name)
	}
	s.rv++
	l := lease.DeepCopy()
	l.ResourceVersion = strconv.Itoa(s.rv)
	l.UID = types.UID(fmt.Sprintf("uid-%d", s.rv))
	s.leases[key] = l
	s.sendLocked(watch.Added, l)
	return l.DeepCopy(), nil
}

func (s *fakeStore) Update(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := s.enter("update", lease.Namespace, lease.Name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := lease.Namespace + "/" + lease.Name
	current, ok := s.leases[key]
	switch {
	case !ok:
		return nil, apierrors.NewNotFound(leasesResource, lease.Name)
	case lease.ResourceVersion != current.ResourceVersion:
		return nil, apierrors.NewConflict(leasesResource, lease.Name,
			fmt.Errorf("resourceVersion %s, current %s", lease.ResourceVersion, current.ResourceVersion))
	}
	s.rv++
	l := lease.DeepCopy()
	l.ResourceVersion, l.UID = strconv.Itoa(s.rv), current.UID
	s.leases[key] = l
	s.sendLocked(watch.Modified, l)
	return l.DeepCopy(), nil
}

func (s *fakeStore) Delete(_ context.Context, namespace, name string, pre metav1.Preconditions) error {
	if err := s.enter("delete", namespace, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	current, ok := s.leases[key]
	switch {
	case !ok:
		return apierrors.NewNotFound(leasesResource, name)
	case pre.UID != nil && *pre.UID != current.UID,
		pre.ResourceVersion != nil && *pre.ResourceVersion != current.ResourceVersion:
		return apierrors.NewConflict(leasesResource, name, fmt.Errorf("preconditions do not match"))
	}
	delete(s.leases, key)
	s.rv++
	gone := current.DeepCopy()
	gone.ResourceVersion = strconv.Itoa(s.rv)
	s.sendLocked(watch.Deleted, gone)
	return nil
}

func (s *fakeStore) List(_ context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if err := s.enter("list", namespace, ""); err != nil {
		return nil, err
	}
	sel, err := newStoreSelection(namespace, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
	for _, l := range s.leases {
		if sel.matches(l) {
			list.Items = append(list.Items, *l.DeepCopy())
		}
	}
	return list, nil
}

// Watch serves events from now on (a test's informer lists first, and
// nothing is written between its list and its watch but what the test
// writes after both).
func (s *fakeStore) Watch(_ context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	if err := s.enter("watch", namespace, ""); err != nil {
		return nil, err
	}
	sel, err := newStoreSelection(namespace, opts)
	if err != nil {
		return nil, err
	}
	w := &storeWatch{store: s, sel: sel, ch: make(chan watch.Event, 100), stopped: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watches[w] = true
	return w, nil
}

func (s *fakeStore) sendLocked(t watch.EventType, l *coordinationv1.Lease) {
	for w := range s.watches {
		if w.sel.matches(l) {
			select {
			case w.ch <- watch.Event{Type: t, Object: l.DeepCopy()}:
			case <-w.stopped:
			}
		}
	}
}

type storeSelection struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
}

func newStoreSelection(namespace string, opts metav1.ListOptions) (storeSelection, error) {
	sel := storeSelection{namespace: namespace, labels: labels.Everything(), fields: fields.Everything()}
	var err error
	if opts.LabelSelector != "" {
		if sel.labels, err = labels.Parse(opts.LabelSelector); err != nil {
			return sel, apierrors.NewBadRequest(err.Error())
		}
	}
	if opts.FieldSelector != "" {
		if sel.fields, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return sel, apierrors.NewBadRequest(err.Error())
		}
	}
	return sel, nil
}

func (sel storeSelection) matches(l *coordinationv1.Lease) bool {
	return (sel.namespace == "" || l.Namespace == sel.namespace) &&
		sel.labels.Matches(labels.Set(l.Labels)) &&
		sel.fields.Matches(fields.Set{"metadata.name": l.Name, "metadata.namespace": l.Namespace})
}

type storeWatch struct {
	store    *fakeStore
	sel      storeSelection
	ch       chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
}

func (w *storeWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *storeWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		w.store.mu.Lock()
		delete(w.store.watches, w)
		w.store.mu.Unlock()
	})
}
