"""Manifest validation harness for the GitOps tree (base/, overlays/, argocd/).

Run as ``python -m validation`` (``make validate``): renders every kustomization with
``kubectl kustomize`` (remote bases replaced by offline mirrors when ``UPSTREAM_MIRROR_DIR`` is
set), validates every object strictly against its schema (built-in kinds with the
``kubernetes-validate`` schemas of the pinned Kubernetes version, custom resources with the
CRDs-catalog JSON schemas from ``KUBE_SCHEMA_DIR``), then runs policy checks (resources,
restricted security context, pinned images, probes, RBAC without wildcards) and consistency
checks against the Python code (CLI flags, model types, shared paths, namespaces, Workflow
structure, pinned versions). See :mod:`validation.cli`.
"""

from validation.report import Finding

__all__ = ["Finding"]
