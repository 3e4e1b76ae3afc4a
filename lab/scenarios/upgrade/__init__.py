"""upgrade.yml refuses a bad pin, rolls back a broken runner image, and moves GPUStack and vLLM in one pins change."""
