"""playbooks/bench.yml boots an A/B arm through GPUStack, measures it against the baseline and puts it back."""
