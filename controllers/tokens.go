package controllers

import (
	"context"
	"fmt"
	"os"
	"time"

	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/fleet-controller-manager/fleet-controller-manager/informers"
)

// newTokensController is KCM's newServiceAccountTokenController (it is not
// exported): the token controller with the root client.
func (r *Runtime) newTokensController(ctx context.Context, cc kcmapp.ControllerContext) (kcmapp.Controller, error) {
	keyFile := cc.ComponentConfig.SAController.ServiceAccountKeyFile
	if keyFile == "" {
		return nil, nil
	}
	privateKey, err := keyutil.PrivateKeyFromFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the service account signing key: %w", err)
	}
	var rootCA []byte
	if file := cc.ComponentConfig.SAController.RootCAFile; file != "" {
		if rootCA, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("reading root-ca-file: %w", err)
		}
	} else {
		cfg, err := r.partitionRootBuilder.Config("tokens-controller")
		if err != nil {
			return nil, err
		}
		rootCA = cfg.CAData
	}
	client, err := r.partitionRootBuilder.Client("tokens-controller")
	if err != nil {
		return nil, err
	}
	generator, err := serviceaccount.JWTTokenGenerator(serviceaccount.LegacyIssuer, privateKey)
	if err != nil {
		return nil, fmt.Errorf("building the token generator: %w", err)
	}
	tc, err := serviceaccountcontroller.NewTokensController(klog.FromContext(ctx),
		cc.InformerFactory.Core().V1().ServiceAccounts(), lossIgnoringSecrets{cc.InformerFactory.Core().V1().Secrets()}, client,
		serviceaccountcontroller.TokensControllerOptions{TokenGenerator: generator, RootCA: rootCA})
	if err != nil {
		return nil, fmt.Errorf("creating the tokens controller: %w", err)
	}
	workers := int(cc.ComponentConfig.SAController.ConcurrentSATokenSyncs)
	return controllerLoop{name: names.ServiceAccountTokenController, run: func(ctx context.Context) { tc.Run(ctx, workers) }}, nil
}

// lossIgnoringSecrets is the token controller's Secret informer: its
// handlers are not told of the Secrets of a partition the replica loses
// (informers.IgnoreLosses), which that controller's filter would reject
// one error at a time.
type lossIgnoringSecrets struct{ coreinformers.SecretInformer }

func (s lossIgnoringSecrets) Informer() cache.SharedIndexInformer {
	return lossIgnoringInformer{s.SecretInformer.Informer()}
}

type lossIgnoringInformer struct{ cache.SharedIndexInformer }

func (i lossIgnoringInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(informers.IgnoreLosses(h))
}

func (i lossIgnoringInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(informers.IgnoreLosses(h), resync)
}

func (i lossIgnoringInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithOptions(informers.IgnoreLosses(h), options)
}
