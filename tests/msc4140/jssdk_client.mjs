// matrix-js-sdk against the gateway: discovery, schedule, restart, send,
// cancel, list, the delayed state event and the max-delay error, with the
// results checked on the test homeserver. Exit 0 when every check passed.
//
// usage: node jssdk_client.mjs GATEWAY_URL HOMESERVER_URL
import * as sdk from "matrix-js-sdk";

const [gw, hs] = process.argv.slice(2);
const room = "!room:test";
let failed = 0;

function check(ok, what) {
    console.log(`${ok ? "ok" : "FAIL"} - ${what}`);
    if (!ok) failed++;
}

async function hsEvents() {
    const r = await fetch(`${hs}/_test/events`);
    return (await r.json()).events;
}

async function waitFor(pred, ms) {
    const end = Date.now() + ms;
    for (;;) {
        const evs = await hsEvents();
        if (pred(evs) || Date.now() > end) return evs;
        await new Promise((r) => setTimeout(r, 25));
    }
}

const client = sdk.createClient({
    baseUrl: gw,
    accessToken: "tok_alice",
    userId: "@alice:test",
    deviceId: "ALICEDEV",
});

try {
    check(await client.doesServerSupportUnstableFeature("org.matrix.msc4140"),
        "versions advertises org.matrix.msc4140");

    // schedule, restart, and let it run out
    const t0 = Date.now();
    const a = await client._unstable_sendDelayedEvent(room, { delay: 1500 }, null,
        "m.room.message", { msgtype: "m.text", body: "timed out" });
    check(typeof a.delay_id === "string" && a.delay_id.length >= 22, "a delay_id");
    await new Promise((r) => setTimeout(r, 700));
    await client._unstable_restartScheduledDelayedEvent(a.delay_id);
    const restartedAt = Date.now();
    const list = await client._unstable_getDelayedEvents();
    check(Array.isArray(list.delayed_events) &&
        list.delayed_events.some((e) => e.delay_id === a.delay_id),
        "the list holds the scheduled event");

    // a delayed state event, sent on request
    const s = await client._unstable_sendDelayedStateEvent(room, { delay: 600000 },
        "org.matrix.msc3401.call.member", { application: "m.call", call_id: "" },
        "_@alice:test_ALICEDEV");
    await client._unstable_sendScheduledDelayedEvent(s.delay_id);
    let evs = await hsEvents();
    check(evs.some((e) => e.state_key === "_@alice:test_ALICEDEV" &&
        e.type === "org.matrix.msc3401.call.member"),
        "the state event was sent on request");

    // one cancelled through the body form
    const c = await client._unstable_sendDelayedEvent(room, { delay: 600000 }, null,
        "m.room.message", { msgtype: "m.text", body: "never" });
    await client._unstable_updateDelayedEvent(c.delay_id, "cancel");
    const after = await client._unstable_getDelayedEvents();
    check(!after.delayed_events.some((e) => e.delay_id === c.delay_id),
        "the cancelled event left the list");

    // the restarted one arrives, not before restart + delay
    evs = await waitFor((es) => es.some((e) => e.content.body === "timed out"), 10000);
    const sent = evs.find((e) => e.content.body === "timed out");
    check(sent !== undefined, "the message was sent when its delay ran out");
    check(sent && sent.origin_server_ts >= restartedAt + 1500 - 50 &&
        sent.origin_server_ts > t0 + 1500,
        "the restart pushed it later");
    check(!evs.some((e) => e.content.body === "never"), "the cancelled one was not sent");

    // the max-delay error in the shape the SDK knows
    try {
        await client._unstable_sendDelayedEvent(room, { delay: 86400001 }, null,
            "m.room.message", { body: "too late" });
        check(false, "an over-long delay is refused");
    } catch (e) {
        check(e.httpStatus === 400 &&
            e.data["org.matrix.msc4140.errcode"] === "M_MAX_DELAY_EXCEEDED" &&
            e.data["org.matrix.msc4140.max_delay"] === 86400000,
            "an over-long delay is refused with M_MAX_DELAY_EXCEEDED");
    }

    // unknown ids
    try {
        await client._unstable_restartScheduledDelayedEvent("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
        check(false, "an unknown id is refused");
    } catch (e) {
        check(e.httpStatus === 404 && e.errcode === "M_NOT_FOUND", "an unknown id is 404");
    }
} catch (e) {
    console.log(`FAIL - unexpected error: ${e && e.stack ? e.stack : e}`);
    failed++;
}
client.stopClient();
console.log(failed === 0 ? "all passed" : `${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
