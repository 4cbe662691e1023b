//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ociImage is one platform's image read from an OCI image layout (what
// `make image` writes under build/image/oci), with the standard library
// only, as a runtime would read it.
type ociImage struct {
	Config struct {
		User       string
		Entrypoint []string
		Cmd        []string
		Env        []string
		WorkingDir string
		Labels     map[string]string
	}
	// Layers are the layers' blob files, base first.
	Layers []string
	// Sizes are the layers' compressed sizes, in Layers' order.
	Sizes []int64
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

const (
	ociIndexType    = "application/vnd.oci.image.index.v1+json"
	ociManifestType = "application/vnd.oci.image.manifest.v1+json"
)

// readOCIImage finds the image for os/arch in the layout at dir, through the
// nested index the layout's index.json points at.
func readOCIImage(t *testing.T, dir, osName, arch string) ociImage {
	t.Helper()
	blob := func(digest string) string {
		algo, hex, _ := strings.Cut(digest, ":")
		return filepath.Join(dir, "blobs", algo, hex)
	}
	readJSON := func(path string, into any) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading the image (run make image-host): %v", err)
		}
		if err := json.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var index struct{ Manifests []ociDescriptor }
	readJSON(filepath.Join(dir, "index.json"), &index)
	for len(index.Manifests) == 1 && index.Manifests[0].MediaType == ociIndexType {
		next := index.Manifests[0].Digest
		index.Manifests = nil
		readJSON(blob(next), &index)
	}
	var manifestDigest string
	for _, m := range index.Manifests {
		if m.MediaType == ociManifestType && m.Platform != nil && m.Platform.OS == osName && m.Platform.Architecture == arch {
			manifestDigest = m.Digest
		}
	}
	if manifestDigest == "" {
		t.Fatalf("the image in %s has no manifest for %s/%s: %+v", dir, osName, arch, index.Manifests)
	}
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	readJSON(blob(manifestDigest), &manifest)
	var img ociImage
	readJSON(blob(manifest.Config.Digest), &struct{ Config any }{&img.Config})
	for _, l := range manifest.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer %s: media type %s, want a gzip OCI layer", l.Digest, l.MediaType)
		}
		img.Layers = append(img.Layers, blob(l.Digest))
		img.Sizes = append(img.Sizes, l.Size)
	}
	return img
}
