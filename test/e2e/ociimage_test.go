//go:build e2e

package e2e

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
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

// extract unpacks the image's layers into root, keeping modes and owners
// (the test runs as root, as a runtime does). The images here have no
// whiteouts or links; a layer that has one fails the test rather than being
// unpacked wrong.
func (img ociImage) extract(t *testing.T, root string) {
	t.Helper()
	for _, layer := range img.Layers {
		if err := extractLayer(layer, root); err != nil {
			t.Fatalf("extracting %s: %v", filepath.Base(layer), err)
		}
	}
}

func extractLayer(layer, root string) error {
	f, err := os.Open(layer)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean("/" + hdr.Name)
		if strings.HasPrefix(filepath.Base(name), ".wh.") {
			return fmt.Errorf("%s: whiteouts are not handled here", hdr.Name)
		}
		path := filepath.Join(root, name)
		mode := os.FileMode(hdr.Mode).Perm() | tarModeBits(hdr.Mode)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry type %q is not handled here", hdr.Name, hdr.Typeflag)
		}
		if err := os.Lchown(path, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
	}
}

// tarModeBits are the setuid, setgid and sticky bits of a tar header's mode
// as Go's file mode.
func tarModeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}
