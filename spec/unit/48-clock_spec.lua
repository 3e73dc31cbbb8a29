-- relay.clock: Redis TIME pinned to the monotonic clock, with a fake
-- client answering TIME.
local clock = require("relay.clock")
local loop = require("relay.core.loop")


--- A client whose TIME says redis_ms, after a round trip of rtt_s.
local function fake_client(redis_ms, rtt_s)
    return {
        call = function(_, word)
            assert.are.equal("TIME", word)
            if rtt_s then
                loop.sleep(rtt_s)
            end
            if not redis_ms then
                return nil, "not connected", "io"
            end
            return { tostring(math.floor(redis_ms / 1000)), tostring((redis_ms % 1000) * 1000) }
        end,
    }
end


describe("clock", function()
    after_each(clock.reset)

    it("is the host clock until a first sample", function()
        assert.is_true(math.abs(clock.now_ms() - loop.now_ms()) < 50)
    end)

    it("reads Redis's time, however far the host clock is off", function()
        local redis_ms = loop.now_ms() - 6 * 60 * 1000  -- Redis is 6 minutes behind this host
        assert.is_true(clock.refresh(fake_client(redis_ms)))
        local t0 = loop.monotonic()
        assert.is_true(math.abs(clock.now_ms() - redis_ms) < 50)
        loop.sleep(0.1)
        local elapsed_ms = (loop.monotonic() - t0) * 1000
        assert.is_true(math.abs(clock.now_ms() - (redis_ms + elapsed_ms)) < 50)
    end)

    it("keeps its last reading when TIME fails or took too long", function()
        local redis_ms = 1000000000000
        assert.is_true(clock.refresh(fake_client(redis_ms)))
        local ok, err = clock.refresh(fake_client(nil))
        assert.is_nil(ok)
        assert.are.equal("not connected", err)
        ok, err = clock.refresh(fake_client(redis_ms + 999999, 1.1))
        assert.is_nil(ok)
        assert.matches("TIME took", err)
        assert.is_true(math.abs(clock.now_ms() - redis_ms) < 1500)
    end)
end)
