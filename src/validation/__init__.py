"""Offline validation of the GitOps tree (base/, overlays/, argocd/): ``python -m validation``
renders, validates schemas, then runs the checks, one module per topic (docs/validation.md)."""
