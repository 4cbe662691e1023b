package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestRunWritesValidImages builds an image of two platforms from stand-in
// binaries and reads every output back as a runtime would, through
// go-containerregistry's validation (digests, sizes, diff IDs, media
// types): the OCI layout, and each platform's Docker archive.
func TestRunWritesValidImages(t *testing.T) {
	dir := t.TempDir()
	opts := options{binaries: binaries{}, out: filepath.Join(dir, "out"), ref: "example.com/fleet-controller-manager:v1.2.3",
		version: "v1.2.3", revision: "abc", source: "https://example.com", created: "1700000000"}
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		bin := filepath.Join(dir, strings.ReplaceAll(platform, "/", "-"))
		if err := os.WriteFile(bin, []byte("#!/bin/true "+platform), 0o755); err != nil {
			t.Fatal(err)
		}
		opts.binaries[platform] = bin
	}
	if err := run(opts); err != nil {
		t.Fatal(err)
	}

	index, err := layout.ImageIndexFromPath(filepath.Join(opts.out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(index); err != nil {
		t.Errorf("the OCI layout: %v", err)
	}
	top, err := index.IndexManifest()
	if err != nil || len(top.Manifests) != 1 {
		t.Fatalf("the layout's index.json: %v, %d entries, want one (the image's index)", err, len(top.Manifests))
	}
	if got := top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "v1.2.3" {
		t.Errorf("ref.name annotation %q, want the tag", got)
	}
	imageIndex, err := index.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := imageIndex.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 2 {
		t.Fatalf("the image's index has %d platforms, want 2", len(manifest.Manifests))
	}
	for _, desc := range manifest.Manifests {
		img, err := imageIndex.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		config, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		platform := desc.Platform.OS + "/" + desc.Platform.Architecture
		if config.OS+"/"+config.Architecture != platform || config.Config.User != "65532:65532" ||
			config.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" || config.Created.Unix() != 1700000000 {
			t.Errorf("%s: config os/arch %s/%s, user %q, labels %v, created %v", platform, config.OS, config.Architecture,
				config.Config.User, config.Config.Labels, config.Created)
		}

		archive := filepath.Join(opts.out, "fleet-controller-manager-"+strings.ReplaceAll(platform, "/", "-")+".docker.tar")
		tag, err := name.NewTag(opts.ref)
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if err := validate.Image(loaded); err != nil {
			t.Errorf("%s: %v", archive, err)
		}
	}

	// The same inputs give the same index: the build is reproducible.
	first, _ := imageIndex.Digest()
	opts.out = filepath.Join(dir, "again")
	if err := run(opts); err != nil {
		t.Fatal(err)
	}
	again, err := layout.ImageIndexFromPath(filepath.Join(opts.out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	againTop, _ := again.IndexManifest()
	if againTop.Manifests[0].Digest != first {
		t.Errorf("a second build of the same binaries gave index %s, the first %s", againTop.Manifests[0].Digest, first)
	}
}

// TestPushToRegistry pushes an image of two platforms with -push to a
// registry on loopback (go-containerregistry's in-memory one) and pulls the
// index back: both platforms, valid.
func TestPushToRegistry(t *testing.T) {
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer server.Close()
	host := strings.TrimPrefix(server.URL, "http://")
	dir := t.TempDir()
	opts := options{binaries: binaries{}, ref: host + "/fleet-controller-manager:v1.2.3", version: "v1.2.3", push: true}
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		bin := filepath.Join(dir, strings.ReplaceAll(platform, "/", "-"))
		if err := os.WriteFile(bin, []byte(platform), 0o755); err != nil {
			t.Fatal(err)
		}
		opts.binaries[platform] = bin
	}
	if err := run(opts); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(opts.ref)
	if err != nil {
		t.Fatal(err)
	}
	index, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	if err := validate.Index(index); err != nil {
		t.Error(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil || len(manifest.Manifests) != 2 {
		t.Fatalf("pulled index: %v, %d platforms, want 2", err, len(manifest.Manifests))
	}
}
