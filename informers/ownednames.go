package informers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/pager"
)

// namespaceNames reads the name of every namespace by a consistent list
// (no resource version: the server reads its store as it is now), so
// that it holds every namespace created before it was asked for.
func (o *OwnedCache) namespaceNames(ctx context.Context) ([]string, error) {
	client, err := o.config.RESTClients.forGroupVersion(corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	list, _, err := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return client.Get().Resource("namespaces").VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Get()
	}).ListWithAlloc(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var names []string
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		names = append(names, m.GetName())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return names, nil
}
