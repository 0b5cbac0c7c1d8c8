"""Offline validation of the GitOps tree (base/, overlays/, argocd/): ``python -m validation``.

Render (:mod:`~validation.render`), schemas (:mod:`~validation.schemas`), then the checks,
registered by name (:mod:`~validation.core`) in one module per topic. See docs/validation.md.
"""
