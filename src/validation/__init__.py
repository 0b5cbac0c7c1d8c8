"""Offline validation of the GitOps tree (base/, overlays/, argocd/): ``python -m validation``.

Renders every kustomization (:mod:`validation.render`), validates our objects strictly with
kubeconform (:mod:`validation.schemas`), then runs the checks, registered by name and grouped
by topic: :mod:`validation.workflow`, :mod:`validation.rbac`, :mod:`validation.training`,
:mod:`validation.serving`, :mod:`validation.cli_paths`, :mod:`validation.pods`,
:mod:`validation.gitops`; ``remote-refs`` (versions) lives in :mod:`validation.render`.
Every finding is built by :func:`validation.core.finding`. See docs/validation.md.
"""
