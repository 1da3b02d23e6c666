// The browser side of the JS client tests: exposes the replay and the API
// checks to the driver (Selenium's execute_async_script).
import { replayVector } from "./replay.js";
import { runClientChecks } from "./client-checks.js";
import { defaultURL } from "../tally.js";

window.replayVector = (vector) => replayVector(vector, { url: defaultURL() });
window.runClientChecks = () => runClientChecks({ url: defaultURL() });
window.replayReady = true;
document.getElementById("log").textContent = "ready";
