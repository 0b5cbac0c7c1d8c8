"""`pulumi up` in this folder, with Pulumi's Python language host: the program of
scripts/pulumi.sh for the overlay named by the stack's config ``environment`` (default: the
stack's name), through the default provider (the ambient kubeconfig)."""

import pulumi

import program

environment = pulumi.Config().get("environment") or pulumi.get_stack()
program.ml_layer(program.render(environment))
