package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// (g) every Deployment of workload (a) deleted with background
// propagation, as `kubectl delete` does: the time until every ReplicaSet
// and Pod they owned is gone measures the garbage collector.
func (b *bench) deleteDeployments() error {
	start := time.Now()
	background := metav1.DeletePropagationBackground
	for _, ns := range b.namespaces() {
		if err := b.client.AppsV1().Deployments(ns).DeleteCollection(b.ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("deleting the Deployments of %s: %w", ns, err)
		}
	}
	left := ""
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range b.namespaces() {
			rss, err := b.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil || len(rss.Items) > 0 {
				left = "ReplicaSets in " + ns
				return false, nil
			}
			// Jobs' pods stay; only the Deployments' (labelled app=web-N).
			pods, err := b.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app", Limit: 1})
			if err != nil || len(pods.Items) > 0 {
				left = "Deployment pods in " + ns
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to go: %w", left, err)
	}
	b.figures["g_cascade_s"] = time.Since(start).Seconds()
	return nil
}

// (f) every namespace of workload (a) deleted at once: the time until all
// are gone measures the namespace controller (each still holds what the
// earlier workloads left there: Jobs and their pods, events, service
// accounts, config maps).
func (b *bench) deleteNamespaces() error {
	start := time.Now()
	if err := b.removeNamespaces(b.namespaces()); err != nil {
		return err
	}
	b.figures["f_namespaces_s"] = time.Since(start).Seconds()
	return nil
}

// removeNamespaces deletes namespaces at once and waits until all are gone.
func (b *bench) removeNamespaces(namespaces []string) error {
	for _, ns := range namespaces {
		if err := b.client.CoreV1().Namespaces().Delete(b.ctx, ns, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("deleting namespace %s: %w", ns, err)
		}
	}
	left := ""
	err := wait.PollUntilContextTimeout(b.ctx, 250*time.Millisecond, workloadTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range namespaces {
			if _, err := b.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !errors.IsNotFound(err) {
				left = ns
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for namespace %s to go: %w", left, err)
	}
	return nil
}
