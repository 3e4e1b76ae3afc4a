"""playbooks/verify.yml run against one OpenAI-compatible endpoint (a CPU vLLM server of this tier), and its
llm_verify result read back from the structured results."""

from __future__ import annotations

from support.ansible_runner import REPO, run_playbook

VERIFY = REPO / "playbooks" / "verify.yml"


def verify(inventory, server_url, model, expectations, *, max_model_len=4096, boot_log=None, tokenize=True,
           checks=None, token_record="", revision="a" * 40, multimodal=False, image_processor=None):
    """The verify play against ``server_url`` as one route named ``model``; ``checks`` replaces the default
    list (the route's ``multimodal`` flag still adds ``images`` or ``images_refused``)."""
    route = {"name": model, "max_model_len": max_model_len, "multimodal": multimodal}
    if boot_log:
        route["boot_log_path"] = str(boot_log)
    if image_processor:
        route["image_processor"] = image_processor
    extra = {
        "pairserve_verify_api_url": server_url,
        "pairserve_verify_api_key": "",
        "pairserve_verify_wait_for_instances": False,
        "pairserve_verify_gpustack_api_url": "",
        "pairserve_verify_gpustack_api_key": "",
        "pairserve_verify_routes": [route],
        "pairserve_verify_expectations_file": expectations,
        "pairserve_verify_tokenize_url": server_url + "/tokenize" if tokenize else "",
        "pairserve_verify_request_timeout": 120,
        # No token counts kept on this machine unless a test names a file for them.
        "pairserve_verify_token_record_path": token_record,
        "pairserve_checkpoint_revision": revision,
    }
    if checks is not None:
        extra["pairserve_verify_checks"] = checks
    return run_playbook(VERIFY, inventory=inventory, extra_vars=extra, timeout=900)


def verify_result(res):
    """The llm_verify task result (the last record whose item is the route)."""
    flat = []
    for record in res.results:  # a looped task records its items under "results"
        flat.extend(record.get("results") or [record])
    records = [r for r in flat if "checks" in r and "failed_checks" in r and r.get("checks")]
    assert records, "no llm_verify result recorded:\n%s\n%s" % (res.stdout[-3000:], res.stderr[-2000:])
    return records[-1]


def by_check(result):
    return {c["check"]: c for c in result["checks"]}
