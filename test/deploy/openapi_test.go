package deploy

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// This file checks rendered objects against the openAPIV3Schema of a
// CustomResourceDefinition checked in under testdata/schemas, the way the API
// server does with strict field validation (kubectl's default): wrong types,
// missing required fields, values out of range and unknown fields are
// errors. It implements the keywords CRD schemas use; a schema with any
// other keyword, or a CEL rule (x-kubernetes-validations) that celRules
// does not implement, makes the check fail rather than pass unchecked.

// crdSchema returns the openAPIV3Schema of the served version of a CRD file
// that apiVersion names, and the CRD's kind.
func crdSchema(t *testing.T, file, apiVersion string) (schema map[string]any, kind string) {
	t.Helper()
	var crd struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Group string `yaml:"group"`
			Names struct {
				Kind string `yaml:"kind"`
			} `yaml:"names"`
			Versions []struct {
				Name   string `yaml:"name"`
				Served bool   `yaml:"served"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	readYAML(t, file, &crd)
	if crd.Kind != "CustomResourceDefinition" {
		t.Fatalf("%s: kind %q, want CustomResourceDefinition", file, crd.Kind)
	}
	for _, v := range crd.Spec.Versions {
		if crd.Spec.Group+"/"+v.Name == apiVersion && v.Served && v.Schema.OpenAPIV3Schema != nil {
			return v.Schema.OpenAPIV3Schema, crd.Spec.Names.Kind
		}
	}
	t.Fatalf("%s: no served version %s with a schema", file, apiVersion)
	return nil, ""
}

// validateCustomResource returns the problems of obj against the CRD in
// file: its apiVersion and kind, its metadata as ObjectMeta, and the rest
// against the schema.
func validateCustomResource(t *testing.T, file string, obj map[string]any) []string {
	t.Helper()
	apiVersion, _ := obj["apiVersion"].(string)
	schema, kind := crdSchema(t, file, apiVersion)
	var errs []string
	if obj["kind"] != kind {
		errs = append(errs, fmt.Sprintf("kind %v, want %s", obj["kind"], kind))
	}
	errs = append(errs, validateObjectMeta(obj["metadata"])...)
	rest := map[string]any{}
	for k, v := range obj {
		if k != "metadata" {
			rest[k] = v
		}
	}
	props, _ := schema["properties"].(map[string]any)
	s := map[string]any{}
	for k, v := range schema {
		s[k] = v
	}
	p := map[string]any{}
	for k, v := range props {
		if k != "metadata" {
			p[k] = v
		}
	}
	s["properties"] = p
	return append(errs, validateOpenAPI(s, rest, "")...)
}

var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelName    = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

// validateObjectMeta checks the metadata a chart renders: a DNS subdomain
// name, valid label keys and values, string annotations, nothing else.
func validateObjectMeta(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{"metadata: not a mapping"}
	}
	var errs []string
	for k, x := range m {
		switch k {
		case "name", "namespace":
			s, _ := x.(string)
			if len(s) > 253 || !dnsSubdomain.MatchString(s) {
				errs = append(errs, fmt.Sprintf("metadata.%s %v: not a DNS subdomain", k, x))
			}
		case "labels", "annotations":
			mm, ok := x.(map[string]any)
			if !ok {
				errs = append(errs, fmt.Sprintf("metadata.%s: not a mapping", k))
				continue
			}
			for key, val := range mm {
				name := key[strings.LastIndex(key, "/")+1:]
				if len(name) > 63 || !labelName.MatchString(name) {
					errs = append(errs, fmt.Sprintf("metadata.%s: bad key %q", k, key))
				}
				s, ok := val.(string)
				if !ok {
					errs = append(errs, fmt.Sprintf("metadata.%s.%s: %v is not a string", k, key, val))
				} else if k == "labels" && s != "" && (len(s) > 63 || !labelName.MatchString(s)) {
					errs = append(errs, fmt.Sprintf("metadata.labels.%s: bad value %q", key, s))
				}
			}
		default:
			errs = append(errs, fmt.Sprintf("metadata.%s: not expected in a rendered object", k))
		}
	}
	if m["name"] == nil {
		errs = append(errs, "metadata.name: required")
	}
	return errs
}

// schemaAnnotations are keywords that do not constrain values.
var schemaAnnotations = map[string]bool{
	"description": true, "default": true, "example": true, "title": true,
	"x-kubernetes-list-type": true, "x-kubernetes-list-map-keys": true, "x-kubernetes-map-type": true,
}

// schemaKeywords are the keywords validateOpenAPI implements.
var schemaKeywords = map[string]bool{
	"type": true, "properties": true, "additionalProperties": true, "required": true,
	"items": true, "enum": true, "minimum": true, "maximum": true, "minLength": true,
	"maxLength": true, "minItems": true, "maxItems": true, "pattern": true, "format": true,
	"anyOf": true, "nullable": true, "x-kubernetes-int-or-string": true,
	"x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-validations": true,
}

// celRules implements the CEL rules of the checked-in CRDs, by their text
// (whitespace collapsed).
var celRules = map[string]func(self map[string]any) error{
	// keda.sh_scaledobjects.yaml, spec.
	`!has(self.minReplicaCount) || self.minReplicaCount <= (has(self.maxReplicaCount) ? self.maxReplicaCount : 100)`: func(self map[string]any) error {
		lo, ok := self["minReplicaCount"].(int)
		if !ok {
			return nil
		}
		hi := 100
		if v, ok := self["maxReplicaCount"].(int); ok {
			hi = v
		}
		if lo > hi {
			return fmt.Errorf("minReplicaCount %d above maxReplicaCount %d", lo, hi)
		}
		return nil
	},
}

// validateOpenAPI returns the problems of v against an OpenAPI v3
// structural schema, each prefixed with its path.
func validateOpenAPI(s map[string]any, v any, path string) []string {
	at := path
	if at == "" {
		at = "."
	}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !schemaKeywords[k] && !schemaAnnotations[k] {
			fail("schema keyword %q is not implemented by this checker", k)
		}
	}
	if v == nil {
		if s["nullable"] != true {
			fail("null")
		}
		return errs
	}
	if s["x-kubernetes-int-or-string"] == true {
		switch v.(type) {
		case int, string:
		default:
			fail("%v (%T) is neither an integer nor a string", v, v)
			return errs
		}
	}
	if alts, ok := s["anyOf"].([]any); ok {
		matched := false
		for _, sub := range alts {
			if len(validateOpenAPI(sub.(map[string]any), v, path)) == 0 {
				matched = true
				break
			}
		}
		if !matched {
			fail("%v matches none of anyOf", v)
		}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		fail("%v is not one of %v", v, enum)
	}
	switch typ, _ := s["type"].(string); typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			fail("%v (%T) is not an object", v, v)
			return errs
		}
		props, _ := s["properties"].(map[string]any)
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if p, ok := props[k].(map[string]any); ok {
				errs = append(errs, validateOpenAPI(p, m[k], path+"."+k)...)
			} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
				errs = append(errs, validateOpenAPI(ap, m[k], path+"."+k)...)
			} else if s["additionalProperties"] != true && s["x-kubernetes-preserve-unknown-fields"] != true {
				fail("unknown field %q", k)
			}
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				fail("required field %q missing", r)
			}
		}
		rules, _ := s["x-kubernetes-validations"].([]any)
		for _, r := range rules {
			text := strings.Join(strings.Fields(fmt.Sprint(r.(map[string]any)["rule"])), " ")
			check, ok := celRules[text]
			if !ok {
				fail("CEL rule not implemented by this checker: %s", text)
			} else if err := check(m); err != nil {
				fail("%v", err)
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			fail("%v (%T) is not an array", v, v)
			return errs
		}
		if n, ok := s["minItems"].(int); ok && len(l) < n {
			fail("%d items, at least %d wanted", len(l), n)
		}
		if n, ok := s["maxItems"].(int); ok && len(l) > n {
			fail("%d items, at most %d allowed", len(l), n)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, x := range l {
				errs = append(errs, validateOpenAPI(items, x, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			fail("%v (%T) is not a string", v, v)
			return errs
		}
		if n, ok := s["minLength"].(int); ok && len(str) < n {
			fail("%q is shorter than %d", str, n)
		}
		if n, ok := s["maxLength"].(int); ok && len(str) > n {
			fail("%q is longer than %d", str, n)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			fail("%q does not match %s", str, p)
		}
	case "integer":
		n, ok := v.(int)
		if !ok {
			fail("%v (%T) is not an integer", v, v)
			return errs
		}
		if s["format"] == "int32" && (n < -1<<31 || n > 1<<31-1) {
			fail("%d is out of int32", n)
		}
		if lo, ok := s["minimum"].(int); ok && n < lo {
			fail("%d is below the minimum %d", n, lo)
		}
		if hi, ok := s["maximum"].(int); ok && n > hi {
			fail("%d is above the maximum %d", n, hi)
		}
	case "number":
		switch v.(type) {
		case int, float64:
		default:
			fail("%v (%T) is not a number", v, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("%v (%T) is not a boolean", v, v)
		}
	case "":
		// anyOf and int-or-string schemas have no type.
	default:
		fail("schema type %q is not implemented by this checker", typ)
	}
	return errs
}
