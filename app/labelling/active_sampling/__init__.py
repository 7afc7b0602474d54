"""Active sampling: the policy that sets the queue's priorities, the annotators' reliability and whether the
ranking is settled (policy), and the process of its own it reruns in (policy_runner)."""
