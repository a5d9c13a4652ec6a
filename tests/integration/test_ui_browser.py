"""The UI path in a real browser (Debian's chromium driven by selenium; `.ci/run` installs both): the
local UI's run page for the `build` deployment shows the model as a dropdown of the shipped configs
(and the recipe as a choice of the registered ones), a run started there with Submit completes on the
served deployment, and a screenshot of the form is kept (FARM_TEST_ARTIFACTS, default
.test-artifacts/)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from farmtest import REPO, free_port, run_farm

pytestmark = pytest.mark.slow
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not (CHROMIUM and DRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium / chromedriver missing: .ci/run installs them (apt-get install chromium chromium-driver)")
        pytest.skip("chromium / chromedriver not installed: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options

    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1800"):
        opts.add_argument(arg)
    opts.binary_location = CHROMIUM
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(DRIVER))
    yield driver
    driver.quit()


@pytest.fixture
def local_farm(built):
    env = {k: v for k, v in built.env.items() if k not in ("PREFECT_API_URL", "FARM_PREFECT_SERVER")}
    env["FARM_PREFECT_PORT"] = str(free_port())
    started = run_farm(["server", "start", "--json"], env)
    assert started.returncode == 0, started.stderr
    yield env, json.loads(started.stdout)
    run_farm(["server", "stop"], env)


def test_build_from_the_ui_form(browser, local_farm):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _env, server = local_farm
    api, ui = server["api_url"], server["ui_url"]
    deadline = time.monotonic() + 120
    while (r := httpx.get(f"{api}/deployments/name/build-model/build", timeout=10)).status_code != 200:
        assert time.monotonic() < deadline, "the served build deployment never appeared"
        time.sleep(1)
    dep = r.json()["id"]
    browser.get(f"{ui}/deployments/deployment/{dep}/run")
    deadline = time.monotonic() + 60
    # The form's dropdowns (the UI also renders empty placeholder selects), and the rest of the form:
    # on a loaded machine (CI, both cores busy) the dropdowns were filled while the fields below them
    # ("Run Gates", "Runtime") were not yet on the page.
    while (len(selects := [e for e in browser.find_elements(By.CSS_SELECTOR, "select") if Select(e).options]) < 2
           or "Run Gates" not in (body := browser.find_element(By.TAG_NAME, "body").text) or "Runtime" not in body):
        assert time.monotonic() < deadline, browser.find_element(By.TAG_NAME, "body").text[:2000]
        time.sleep(0.5)
    assert "Can't connect to Server API" not in body  # the UI is pointed at this server's API
    model, recipe = Select(selects[0]), Select(selects[1])
    # Every shipped config by its name and every shipped recipe, read from the files themselves.
    import yaml

    names = sorted(yaml.safe_load(p.read_text())["name"] for p in (REPO / "examples").glob("*.yaml"))
    assert [o.text for o in model.options] == names and {"tiny-qwen35", "gemma3-270m"} <= set(names)
    recipes = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))
    assert [o.text for o in recipe.options] == ["(the config's own)", *recipes] and "dynamic_wi4_b32" in recipes
    assert "Run Gates" in body and "Runtime" in body
    model.select_by_visible_text("tiny-qwen35")
    recipe.select_by_visible_text("qwen35_wi8_float_gates")
    shots = Path(os.environ.get("FARM_TEST_ARTIFACTS", REPO / ".test-artifacts"))
    shots.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shots / "ui-build-form.png"))
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    deadline = time.monotonic() + 600
    while True:
        runs = httpx.post(f"{api}/flow_runs/filter", timeout=10,
                          json={"flows": {"name": {"any_": ["build-model"]}}}).json()
        done = [r for r in runs if r["state_type"] in ("COMPLETED", "FAILED", "CRASHED")]
        if done:
            break
        assert time.monotonic() < deadline, f"the UI's run did not finish: {[r['state_type'] for r in runs]}"
        time.sleep(2)
    (run,) = done
    assert run["state_type"] == "COMPLETED" and run["parameters"]["params"]["model"] == "tiny-qwen35"
    assert run["parameters"]["params"]["recipe"] == "qwen35_wi8_float_gates"
