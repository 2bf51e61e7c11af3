"""The console's pages in a real headless browser (Debian's chromium + chromium-driver, selenium):
each page shows the numbers the JSON API and Kafka's admin API give, the offsets graph draws
points, the browser logs no errors, and actions work, and are refused for an active group.
Screenshots of every page are written under the test's temp dir."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.console import (
    ActiveConsumer,
    commit,
    console_url,
    get_json,
    produce_single_batches,
    start_console_broker,
    wait_for,
)

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
_MISSING = "Debian's chromium and chromium-driver and the selenium package are needed (.ci/run installs them)"
try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - CI installs selenium with the test extra
    webdriver = None
if os.environ.get("STROM_COMPAT_REQUIRE_ALL") and (webdriver is None or not (CHROMIUM and CHROMEDRIVER)):
    raise RuntimeError(_MISSING + "; STROM_COMPAT_REQUIRE_ALL is set, so this is a failure, not a skip")
pytestmark = pytest.mark.skipif(webdriver is None or not (CHROMIUM and CHROMEDRIVER), reason=_MISSING)

TOPIC = "browser-orders"
GROUP = "browser-billing"
PRODUCED = {0: 12, 1: 8, 2: 5}
COMMITTED = {0: 2, 1: 8, 2: 1}


class BackgroundProducer:
    """Keeps producing to its own topic while the pages are looked at."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": "browser-live-producer", "linger.ms": 5})
        self.topic, self.stop_event = topic, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            self.producer.produce(self.topic, value=b'{"n": %d}' % n)
            self.producer.poll(0)
            n += 1
            time.sleep(0.02)
        self.producer.flush(10)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(15)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    broker = start_console_broker(tmp_path_factory.mktemp("console-browser"))
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for name, parts in ((TOPIC, 3), ("browser-live", 1)):
            configs = {"retention.ms": "7200000"} if name == TOPIC else {}
            admin.create_topics([NewTopic(name, parts, 1, config=configs)])[name].result(30)
        produce_single_batches(broker.bootstrap, TOPIC, PRODUCED)
        commit(broker.bootstrap, GROUP, {(TOPIC, p): o for p, o in COMMITTED.items()})
        with BackgroundProducer(broker.bootstrap, "browser-live"):
            yield broker, console_url(broker), admin
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def driver():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()


def _open(driver, url: str, shots, name: str):
    driver.get(url)
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.readyState") == "complete")
    driver.save_screenshot(str(shots / f"{name}.png"))
    return driver


def _errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _text(driver, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text.strip()


def test_pages_show_the_numbers_of_the_api(env, driver, tmp_path):
    broker, base, admin = env
    shots = tmp_path / "screenshots"
    shots.mkdir()
    driver.get_log("browser")  # start clean

    overview = get_json(base, "/api/overview")
    _open(driver, base + "/", shots, "overview")
    assert _text(driver, "#cluster-id") == overview["cluster_id"]
    assert _text(driver, "#controller") == "0"
    assert _text(driver, "#brokers-up") == "1" and _text(driver, "#brokers-down") == "0"
    assert _text(driver, "#partitions") == str(get_json(base, "/api/overview")["partitions"])
    assert _text(driver, "#under-replicated") == "0" and _text(driver, "#offline") == "0"
    assert _text(driver, "#brokers tr[data-broker='0'] .state") == "up"

    _open(driver, base + "/topics", shots, "topics")
    row = f"#topics tr[data-topic='{TOPIC}']"
    assert _text(driver, row + " .records") == str(sum(PRODUCED.values()))
    topic = get_json(base, f"/api/topics/{TOPIC}")
    assert driver.find_element(By.CSS_SELECTOR, row + " .size").get_attribute("data-bytes") == str(topic["size"])

    _open(driver, base + f"/topics/{TOPIC}", shots, "topic")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "browser-watermarks"})
    try:
        for index, count in PRODUCED.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, index), timeout=10)
            prow = f"#partitions tr[data-partition='{index}']"
            assert (_text(driver, prow + " .log-start"), _text(driver, prow + " .hw")) == (str(low), str(high))
            assert _text(driver, prow + " .log-end") == str(count) and _text(driver, prow + " .isr") == "0"
    finally:
        consumer.close()

    overrides = [r.get_attribute("data-config") for r in driver.find_elements(By.CSS_SELECTOR, "#configs tr.override")]
    assert overrides == ["retention.ms"]  # the one non-default config is highlighted

    _open(driver, base + f"/topics/{TOPIC}/records?partition=0&offset=3&limit=4", shots, "records")
    assert _text(driver, "#record-count") == "4"
    offsets = [r.get_attribute("data-offset") for r in driver.find_elements(By.CSS_SELECTOR, "#records tbody tr")]
    assert offsets == ["3", "4", "5", "6"]
    assert _text(driver, "#records tr[data-offset='3'] .key") == "k00003"

    group = get_json(base, f"/api/groups/{GROUP}")
    expected_lag = sum(PRODUCED[p] - COMMITTED[p] for p in PRODUCED)
    assert group["total_lag"] == expected_lag
    _open(driver, base + "/groups", shots, "groups")
    assert _text(driver, f"#groups tr[data-group='{GROUP}'] .total-lag") == str(expected_lag)
    assert _text(driver, f"#groups tr[data-group='{GROUP}'] .lag-bytes") == str(group["total_lag_bytes"])

    wait_for(
        lambda: len(get_json(base, f"/api/groups/{GROUP}/history")["partitions"][0]["times"]) >= 3,
        what="three history samples",
    )
    _open(driver, base + f"/groups/{GROUP}", shots, "group")
    assert _text(driver, "#total-lag") == str(expected_lag) and _text(driver, "#state") == "Empty"
    for entry in group["offsets"]:
        orow = f"#offsets tr[data-tp='{TOPIC}-{entry['partition']}']"
        assert _text(driver, orow + " .committed") == str(COMMITTED[entry["partition"]])
        assert _text(driver, orow + " .lag") == str(PRODUCED[entry["partition"]] - COMMITTED[entry["partition"]])
        assert _text(driver, orow + " .lag-bytes") == str(entry["lag_bytes"])
    points = driver.find_elements(By.CSS_SELECTOR, f".chart-box[data-tp='{TOPIC}-0'] svg circle.point")
    assert len(points) >= 3 * 3  # three lines (log end, committed, lag), at least three samples each

    _open(driver, base + "/clients", shots, "clients")
    clients = get_json(base, "/api/clients")
    live = [c for c in clients if c["client_id"] == "browser-live-producer" and "produces" in c["roles"]]
    assert live
    row = f"#clients tr[data-connection='{live[0]['id']}']"
    assert _text(driver, row + " .roles").startswith("produces")
    assert _text(driver, row + " .software").startswith("confluent-kafka-python")

    assert _errors(driver) == []
    assert sorted(p.name for p in shots.iterdir()) == sorted(
        f"{n}.png" for n in ("overview", "topics", "topic", "records", "groups", "group", "clients")
    )


def _submit(driver, form_css: str, **fields) -> str:
    form = driver.find_element(By.CSS_SELECTOR, form_css)
    for name, value in fields.items():
        element = form.find_element(By.NAME, name)
        if element.tag_name == "select":
            element.find_element(By.XPATH, f".//option[text()='{value}']").click()
        else:
            element.clear()
            element.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
    driver.switch_to.alert.accept()
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "action-result").text)
    return driver.find_element(By.ID, "action-result").text


def test_actions_in_the_browser(env, driver, tmp_path):
    broker, base, _ = env
    group = "browser-active"
    commit(broker.bootstrap, group, {(TOPIC, 0): 5})
    member = ActiveConsumer(broker.bootstrap, group, TOPIC).start()
    try:
        driver.get(base + f"/groups/{group}")
        result = _submit(driver, "form[data-action$='/delete']")
        assert result.startswith("NON_EMPTY_GROUP")
        driver.get(base + f"/groups/{group}")
        result = _submit(driver, "form[data-action$='/reset-offsets']", to="earliest")
        assert result.startswith("NON_EMPTY_GROUP")
        driver.save_screenshot(str(tmp_path / "refused.png"))
    finally:
        member.stop()
    wait_for(lambda: get_json(base, f"/api/groups/{group}")["state"] == "Empty", what="the group to empty")
    driver.get(base + f"/groups/{group}")
    result = _submit(driver, "form[data-action$='/reset-offsets']", to="offset", topic=TOPIC, partition="0", offset="9")
    assert "reset" in result
    assert {o["partition"]: o["committed_offset"] for o in get_json(base, f"/api/groups/{group}")["offsets"]}[0] == 9
    driver.get(base + f"/groups/{group}")
    assert "deleted" in _submit(driver, "form[data-action$='/delete']")
    assert group not in {g["group_id"] for g in get_json(base, "/api/groups")}
    driver.get(base + f"/topics/{TOPIC}")
    assert "deleted" in _submit(driver, "form[data-action$='/delete-records']", partition="2", offset="3")
    assert get_json(base, f"/api/topics/{TOPIC}")["partition_details"][2]["log_start_offset"] == 3
    # the refusals above were 409 answers the page reports; nothing else went wrong in the browser
    unexpected = [e for e in _errors(driver) if "409" not in e["message"]]
    assert unexpected == []
