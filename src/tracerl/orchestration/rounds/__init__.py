"""Scheduled training rounds: ``tracerl train run`` (one round, for cron, systemd timers,
Kubernetes CronJobs), ``tracerl train loop`` (rounds repeated, for a service) and the policy
registry behind ``tracerl policy``.

A round takes the episodes captured since the last one, trains the current policy on them,
publishes the checkpoint and records it, in that order, each step leaving a state the next
run continues from, whatever kills it (src/tracerl/trainer/README.md, "Scheduled rounds").
"""
