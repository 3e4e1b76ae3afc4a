"""Every credential of playbooks/rotate.yml rotated under the request loop (HTTPS); each second run changes nothing."""
