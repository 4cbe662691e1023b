package controllers

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
)

// ownedSelection narrows one kind of the replica's owned cache to the
// objects its partition controllers read. KCM caches every ConfigMap and
// Secret because its one informer factory serves every controller; of the
// partition controllers, only the readers below take these informers
// (TestOwnedSelectionReaders builds each one to check), and each of them
// reads only the objects the selector keeps. Every ConfigMap and Secret in
// full would be the largest part of a replica's live heap, while the
// garbage collector and resourcequota, which need every one of them, read
// metadata from the pool on the replica running them.
type ownedSelection struct {
	object   any
	selector fields.Selector
	// readers are the partition controllers given the kind's informer,
	// each with why the selector loses it nothing.
	readers map[string]string
}

var ownedSelections = []ownedSelection{
	{
		object:   &corev1.ConfigMap{},
		selector: fields.OneTermEqualSelector("metadata.name", rootcacertpublisher.RootCACertConfigMapName),
		readers: map[string]string{
			// publisher.go: its ConfigMap handlers return for any other
			// name, and syncNamespace gets only this name from the lister.
			names.RootCACertificatePublisherController: "reads kube-root-ca.crt only",
		},
	},
	{
		object:   &corev1.Secret{},
		selector: fields.OneTermEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)),
		readers: map[string]string{
			// tokens_controller.go: its Secret handlers filter on this type,
			// so syncSecret's lister Get sees only keys of it, and
			// listTokenSecrets keeps only this type (IsServiceAccountToken).
			// A Secret's type cannot change.
			names.ServiceAccountTokenController: "reads service-account-token Secrets only",
			// legacy_serviceaccount_token_cleaner.go: evaluateSATokens
			// skips every other type; the tracking ConfigMap it reads
			// through the client.
			names.LegacyServiceAccountTokenCleanerController: "reads service-account-token Secrets only",
		},
	},
}

// ownedFieldSelectors is ownedSelections as the owned cache takes them.
func ownedFieldSelectors() map[reflect.Type]fields.Selector {
	out := map[reflect.Type]fields.Selector{}
	for _, s := range ownedSelections {
		out[reflect.TypeOf(s.object)] = s.selector
	}
	return out
}
